"""Software prefetch of a product's next strip of weights, spread over the tiles of the strip
before it.

A packed dense kernel (`schedules.dense_packed`) runs a strip of output columns tile by tile
(rows), each tile reading the strip's weights over the whole depth; a conv whose weights are
split between the cores (`schedules.conv_nchwc`), and a Winograd product, run a group of output
channel blocks row by row (tile by tile) the same way. The first tile of a strip reads the
weights from L3 or memory at the rate of its FMAs, a cache line or more every step, more than
the hardware prefetchers bring; the tiles after it find them in L2. So each tile of a strip
here prefetches its share of the next strip's weights into L2 (`prefetcht1`), a line a step,
and no tile waits for memory: MiniLM's dense kernels, whose 42 MB of weights come from beyond
L2 once per run, took 9.5% less time at 128 tokens, 3-5% with more rows (Intel with AMX).
Each tile prefetching the whole next strip only moved the wait to the second tile.

The schedule marks the reduction loop with `PREFETCH_ATTR`: [strips, weight elements per
strip]. The enclosing parallel loop runs the strips in turn and each strip's tiles in it, so
a strip has the loop's extent over the strips in tiles (symbolic for a run-time row count),
and a tile's place in its strip is the loop's index modulo that. A step is an iteration of
the marked loop and of the loops in it around the first vector load (a conv's input channels,
kernel rows and the lanes of an input block). The strips are contiguous runs of the weight,
one after another from its start, so the strip a tile reads is where that load's index (the
values it is bound from written in) lies at the first step. This runs on the host module
after `SerialSmallKernels`, where the loop bodies are flat (`TIR_PIPELINE`); a loop it cannot
read so is left as it is. Prefetches never fault: the last strip's reach past the weight's end
is clamped to its last element all the same.
"""

from __future__ import annotations

import math

import tvm
import tvm_ffi
from tvm import tirx

from ..ir_names import PREFETCH_ATTR

LINE_BYTES = 64
_READ, _L2_LOCALITY, _DATA_CACHE = 0, 2, 1  # llvm.prefetch's rw, locality (prefetcht1), cache type


def nodes_of(stmt, kind: type) -> list:
    """Every node of type `kind` in `stmt`, in the order `structural_map` visits them."""
    found = []

    def visit(node):
        found.append(node)
        return node

    tvm_ffi.structural_map(stmt, (kind, visit))
    return found


def _with_body(loop: tirx.For, body: tirx.Stmt) -> tirx.For:
    return tirx.For(loop.loop_var, loop.min, loop.extent, loop.kind, body, loop.thread_binding, loop.annotations,
                    span=loop.span)


def _vector_load(stmt: tirx.Stmt):
    """The first vector load `stmt` makes of a global buffer, or None."""
    for load in nodes_of(stmt, tvm.ir.TensorLoad):
        if isinstance(load.indices[-1], tirx.Ramp) and load.source.scope() == "global":
            return load
    return None


def _inlined(expr, bindings: dict, zeros: list):
    """`expr` with the values `bindings` gives its variables written in, and the loop
    variables `zeros` at 0."""

    def substitute(var):
        if any(var.same_as(zero) for zero in zeros):
            return tirx.const(0, str(var.ty))
        value = bindings.get(var)
        return var if value is None else _inlined(value, bindings, zeros)

    return tvm_ffi.structural_map(expr, (tirx.Var, substitute))


def _enclosing(loop: tirx.For, store: tirx.BufferStore) -> list[tirx.For]:
    """`loop` and the loops in it around `store`, outermost first."""
    around = [inner for inner in nodes_of(loop.body, tirx.For)
              if any(s.same_as(store) for s in nodes_of(inner.body, tirx.BufferStore))]
    return [loop] + sorted(around, key=lambda inner: -len(nodes_of(inner.body, tirx.For)))


def _prefetch(loops: list[tirx.For], tile_loop: tirx.For, first_load) -> tirx.Stmt:
    """The prefetch of this tile's line of the next strip at this step of `loops` (the
    marked loop and those in it around the first load, a step each iteration of them all)."""
    strips, strip = (int(value) for value in loops[0].annotations[PREFETCH_ATTR])
    weight, ramp = first_load.source, first_load.indices[-1]
    index_type = str(ramp.base.ty)
    tiles = tirx.floordiv(tirx.Cast(index_type, tile_loop.extent), strips)  # symbolic for a run-time row count
    tile_index = tirx.Cast(index_type, tile_loop.loop_var)
    size = math.prod(int(dim) for dim in weight.shape)
    line_elements = LINE_BYTES * 8 // tvm.runtime.DataType(weight.dtype).bits
    lines = -(-strip // line_elements)
    share = tirx.floordiv(lines + tiles - 1, tiles)
    step = tirx.const(0, index_type)
    for loop in loops:
        step = step * loop.extent + tirx.Cast(index_type, loop.loop_var)
    # A line a step from the tile's first, its last again once they are done: a min a step
    line = tirx.min(tirx.floormod(tile_index, tiles) * share + tirx.min(step, share - 1), lines - 1)
    # The strips lie one after another from the weight's start: the load's index at the loops'
    # first step lies in this tile's strip.
    bindings = {bind.var: bind.value for bind in nodes_of(tile_loop.body, tirx.Bind)}
    first = _inlined(ramp.base, bindings, [loop.loop_var for loop in loops])
    next_strip = (tirx.floordiv(first, strip) + 1) * strip
    index = tirx.min(next_strip + line * line_elements, size - 1)
    address = tirx.address_of(tirx.BufferLoad(weight, [index]))
    return tirx.Evaluate(tirx.call_intrin("void", "tirx.prefetch", address, _READ, _L2_LOCALITY, _DATA_CACHE))


def _with_prefetch(loop: tirx.For, tile_loop: tirx.For) -> tirx.For:
    """`loop` (marked) with the prefetch after the first store that reads the weight, so that
    it runs once a step of the loops around that store."""
    if PREFETCH_ATTR not in loop.annotations:
        return loop
    first = _vector_load(loop.body)
    if first is None or len(first.indices) != 1 or not all(isinstance(d, tirx.IntImm) for d in first.source.shape):
        return loop
    store = next((s for s in nodes_of(loop.body, tirx.BufferStore)
                  if any(load.same_as(first) for load in nodes_of(s.value, tvm.ir.TensorLoad))), None)
    loops = _enclosing(loop, store) if store is not None else []
    if not loops or not all(isinstance(inner.extent, tirx.IntImm) for inner in loops):
        return loop
    prefetch = _prefetch(loops, tile_loop, first)
    body = tvm_ffi.structural_map(loop.body, (tirx.BufferStore,
                                              lambda s: tirx.SeqStmt([s, prefetch]) if s.same_as(store) else s))
    return _with_body(loop, body)


def _tiles(loop: tirx.For) -> tirx.For:
    """A parallel loop of tiles, its marked reduction loops prefetching."""
    if loop.kind != tirx.ForKind.PARALLEL:
        return loop

    def prefetching(inner: tirx.For) -> tirx.For:
        return _with_prefetch(inner, loop)

    body = tvm_ffi.structural_map(loop.body, (tirx.For, prefetching))
    return loop if body.same_as(loop.body) else _with_body(loop, body)


def PrefetchNextStrip() -> tvm.transform.Pass:
    @tvm.transform.module_pass(opt_level=0, name="tvm_fuse.PrefetchNextStrip")
    def prefetch(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        return tvm_ffi.structural_map(mod, (tirx.For, _tiles))

    return prefetch
