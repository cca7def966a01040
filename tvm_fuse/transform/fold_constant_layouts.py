"""Data movement of constants folded in numpy: a `layout_transform` (a conv's weight or bias
into the blocked layout) as a reshape and a transpose, and `reshape` and `permute_dims`, also of
what this pass folded before them.

TVM's FoldConstant evaluates each such op by compiling it to a kernel of its own, with LLVM, and
running it: tens of milliseconds an op, most of a CNN's build. A layout transform whose every
output index is an input axis, or that axis's quotient or remainder by one factor, splits input
axes (padded to whole blocks) and permutes the parts, which numpy does at once. Other
transforms, and dtypes numpy lacks, are left to FoldConstant. Run it before FoldConstant.
"""

from __future__ import annotations

import numpy as np
import tvm
from tvm import relax, tirx
from tvm.ir.expr import GenericConst

from .rebind import is_op, rebind_pass, static_shape

_FOLDED = ("relax.layout_transform", "relax.reshape", "relax.permute_dims")
_NUMPY_DTYPES = ("float32", "float16", "float64", "int8", "uint8", "int16", "int32", "int64")


def FoldConstantLayouts() -> tvm.transform.Pass:
    return rebind_pass("tvm_fuse.FoldConstantLayouts", _plan)


def _parts(index_map, rank: int) -> list[tuple[int, str, int]] | None:
    """Each output index as (input axis, "whole" / "outer" / "inner", block), or None where one
    is not of those forms or an axis is not split the one way."""
    variables = list(index_map.initial_indices)

    def axis_of(expr) -> int | None:
        return next((axis for axis, v in enumerate(variables) if v.same_as(expr)), None)

    parts = []
    for index in index_map.final_indices:
        if axis_of(index) is not None:
            parts.append((axis_of(index), "whole", 1))
        elif (isinstance(index, (tirx.FloorDiv, tirx.FloorMod)) and axis_of(index.a) is not None
              and isinstance(index.b, tirx.IntImm) and int(index.b) > 0):
            parts.append((axis_of(index.a), "outer" if isinstance(index, tirx.FloorDiv) else "inner", int(index.b)))
        else:
            return None
    for axis in range(rank):
        kinds = sorted((kind, block) for a, kind, block in parts if a == axis)
        if kinds != [("whole", 1)] and [kind for kind, _ in kinds] != ["inner", "outer"] or len({b for _, b in kinds}) != 1:
            return None
    return parts


def folded(call: relax.Call, array: np.ndarray) -> np.ndarray | None:
    """The value of `call` (a `layout_transform`, `reshape` or `permute_dims`) of `array` as
    numpy computes it, or None (left to TVM)."""
    out_shape = static_shape(call)
    if out_shape is None:
        return None
    if is_op(call, "relax.reshape"):
        return array.reshape(out_shape)
    if is_op(call, "relax.permute_dims"):
        axes = call.attrs.axes
        return np.ascontiguousarray(array.transpose(None if axes is None else [int(a) for a in axes]))
    parts = _parts(call.attrs.index_map, array.ndim)
    if parts is None:
        return None
    blocks = {axis: block for axis, kind, block in parts if kind != "whole"}
    pad_value = call.attrs.pad_value
    padding = [(0, -extent % blocks.get(axis, 1)) for axis, extent in enumerate(array.shape)]
    array = np.pad(array, padding, constant_values=0 if pad_value is None else pad_value.value)
    split, position = [], {}
    for axis, extent in enumerate(array.shape):
        if axis in blocks:
            position[(axis, "outer")], position[(axis, "inner")] = len(split), len(split) + 1
            split += [extent // blocks[axis], blocks[axis]]
        else:
            position[(axis, "whole")] = len(split)
            split.append(extent)
    result = array.reshape(split).transpose([position[(axis, kind)] for axis, kind, _ in parts])
    return np.ascontiguousarray(result) if list(result.shape) == out_shape else None


def _plan(func: relax.Function) -> dict[relax.Var, relax.Expr]:
    plan, known = {}, {}  # known: the values of bindings folded here
    for block in func.body.blocks:
        for binding in block.bindings:
            value = binding.value
            if not isinstance(binding, relax.VarBinding) or not any(is_op(value, op) for op in _FOLDED):
                continue
            source = value.args[0]
            if isinstance(source, GenericConst) and str(source.ty.dtype) in _NUMPY_DTYPES:
                array = source.value.numpy()
            elif isinstance(source, relax.Var) and source in known:
                array = known[source]
            else:
                continue
            array = folded(value, array)
            if array is not None:
                known[binding.var] = array
                plan[binding.var] = relax.const(array, str(value.ty.dtype))
    return plan
