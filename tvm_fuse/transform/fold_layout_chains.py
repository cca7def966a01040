"""Fold a chain of data movements that holds a `layout_transform` into one `layout_transform`.

A transformer that runs a conv over its tokens (SegFormer's Mix-FFN, ConvNeXt) turns [B, HW, C] into [B, C, H, W] with a transpose and a reshape, which the
blocked conv then reorders into NCHW{c}c, and back after it: three copies of the tensor each
way, each a kernel. Every one of these ops only moves elements, so their chain is one index
map, `x[n, s, c] -> y[n, c // 16, s // W, s % W, c % 16]`: one copy, reading whole lines and
writing runs of a block.

A chain is folded when its static shapes compose into a map TVM can invert (no padding, no
index computed twice), and its inner values are read by nothing else; otherwise it is left.
"""

from __future__ import annotations

import tvm
from tvm import relax, tirx
from tvm.sym import Analyzer

from .. import provenance
from .relax_helpers import is_op, permutation, rebind_pass, static_shape, use_counts

MOVES = ("relax.permute_dims", "relax.reshape", "relax.layout_transform")


def FoldLayoutChains() -> tvm.transform.Pass:
    return rebind_pass("tvm_fuse.FoldLayoutChains", _plan)


def _plan(func: relax.Function) -> dict[relax.Var, relax.Expr]:
    values = relax.analysis.get_var2val(func)
    uses = use_counts(func)
    plan = {}
    for var in values:
        chain = _chain(var, values, uses)
        moves = [value for _, value in chain]
        if len(moves) < 2 or not any(is_op(move, "relax.layout_transform") for move in moves):
            continue
        folded = _folded(moves)
        if folded is not None:  # the span: the report names the nodes it moves
            plan[var] = provenance.recorded(folded, [provenance.node_index(v) for v, _ in chain])
    return plan


def _chain(var: relax.Var, values: dict, uses) -> list[tuple[relax.Var, relax.Call]]:
    """The moves ending in `var`'s value, first to last, back through values nothing else reads."""
    chain = []
    while _movable(values.get(var)):
        chain.insert(0, (var, values[var]))
        var = values[var].args[0]
        if not isinstance(var, relax.Var) or uses[var] != 1:
            break
    return chain


def _movable(value) -> bool:
    if not is_op(value, *MOVES) or static_shape(value.args[0]) is None:
        return False
    if is_op(value, "relax.layout_transform"):
        return value.attrs.pad_value is None
    return True


def _folded(chain: list[relax.Call]) -> relax.Expr | None:
    """The chain as one layout_transform of its source, or None where the map is not a
    bijection TVM can invert."""
    source = chain[0].args[0]
    shape = static_shape(source)
    variables = [tirx.Var(f"i{axis}", "int64") for axis in range(len(shape))]
    indices = list(variables)
    for move in chain:
        indices, shape = _moved(move, indices, shape)
    analyzer = Analyzer()
    for variable, extent in zip(variables, static_shape(source)):
        analyzer.bind(variable, tvm.ir.Range(0, tirx.const(extent, "int64")))
    index_map = tirx.IndexMap(variables, [analyzer.simplify(i) for i in indices], None)
    try:  # TVM raises where it cannot invert the map
        mapped = [int(d) for d in index_map.map_shape(static_shape(source))]
        _, padding = index_map.non_surjective_inverse(static_shape(source))
    except RuntimeError:
        return None
    if mapped != static_shape(chain[-1]):
        return None
    if not (isinstance(padding, tirx.IntImm) and padding.value == 0):
        return None
    return relax.op.layout_transform(source, index_map)


def _moved(move: relax.Call, indices: list, shape: list[int]) -> tuple[list, list[int]]:
    """Where a move sends the element at `indices` of a tensor of `shape`, and its new shape."""
    axes = permutation(move)
    if axes is not None:
        return [indices[a] for a in axes], [shape[a] for a in axes]
    if is_op(move, "relax.reshape"):
        new_shape = static_shape(move)
        flat = tirx.const(0, "int64")
        for index, extent in zip(indices, shape):
            flat = flat * extent + index
        moved = []
        for extent in reversed(new_shape):
            moved.insert(0, tirx.floormod(flat, extent))
            flat = tirx.floordiv(flat, extent)
        return moved, new_shape
    index_map = move.attrs.index_map
    return list(index_map.map_indices(indices)), [int(d) for d in index_map.map_shape(shape)]


