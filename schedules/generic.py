"""The kernels TVM lowers itself (layout transforms, pooling, elementwise groups, softmax,
layer norm): each elementwise stage computed inside the elementwise stages that read it (one
pass over memory for a chain TVM fused), each remaining top-level block's leading
data-parallel loops fused into one parallel loop, and the innermost loop of an elementwise
block vectorized (u8 and s8 stores too: a quantize), its last vector peeled where the vector
width does not divide it.
A pooling window over a blocked layout (NCHW{c}c, the lanes the innermost axis everywhere)
reads its input with the padding inlined and takes the window one vector of lanes at a time;
so does any reduction over other axes than its innermost (a sum over channels), a vector of its
innermost axis at a time.
A copy whose innermost written and read axes differ (a layout transform between NCHW and
NCHW{c}c) moves tiles of lanes x lanes values, or half as many along NCHW8c's blocks
(`_schedule_transpose`). A reduction of a whole tensor to one value (a dynamically quantized
tensor's range) folds a vector of partial results at a time (`_schedule_full_reduction`).
TVM's dlight CPU reduction rule was tried for softmax, and lost."""

from __future__ import annotations

import math

import tvm
import tvm_ffi
from tvm import s_tir, tirx
from tvm.sym import Analyzer

from ..ir_names import PEEL_ATTR
from .common import parallelize_leading, vectorize_with_tail

# Stored a vector at a time (LLVM cannot vectorize stores of bool).
_VECTOR_DTYPES = {"float32", "int32", "uint8", "int8", "uint16", "int16"}


def _spatial_only(sch: s_tir.Schedule, block) -> bool:
    return all(it.iter_type == 0 for it in sch.get(block).iter_vars)


def _inline_elementwise_chains(sch: s_tir.Schedule, root) -> None:
    """Compute each elementwise stage inside the one elementwise stage that reads it, so that a
    chain TVM fused into one kernel (a concat, a batch norm's multiplies and adds, a ReLU, a
    quantize) is one pass over memory instead of one pass and one intermediate tensor each.
    A stage read by several is left, so as not to compute it twice (DenseNet-121's batch norm +
    ReLU + quantize kernels before its convs)."""
    for block in list(sch.get_child_blocks(root))[:-1]:
        consumers = sch.get_consumers(block)
        if _spatial_only(sch, block) and len(consumers) == 1 and _spatial_only(sch, consumers[0]):
            try:
                sch.compute_inline(block)
            except s_tir.ScheduleError:  # writes an output, or is read at other indices
                pass


def _simplified_loads(func: tvm.tirx.PrimFunc) -> tvm.tirx.PrimFunc:
    """`func` with each load's indices simplified within the ranges of its block's iterators. A
    reshape reads `x[(i // n + j) % m, i % n]` for an `i` below `n` (TOPI's flattened index);
    once the loops are split, nothing knows `i < n` any more, and every lane of a vector
    divides."""
    analyzer = Analyzer()

    def bind(block: s_tir.SBlock) -> s_tir.SBlock:
        for iterator in block.iter_vars:
            analyzer.bind(iterator.var, iterator.dom)
        return block

    tvm_ffi.structural_map(func.body, (s_tir.SBlock, bind))
    return func.with_body(tvm_ffi.structural_map(func.body, (tvm.ir.TensorLoad, lambda load: tirx.BufferLoad(
        load.source, [analyzer.simplify(index) for index in load.indices]))))


def schedule(func: tvm.tirx.PrimFunc, target: tvm.target.Target, lanes: int) -> tvm.tirx.PrimFunc:
    sch = s_tir.Schedule(_simplified_loads(func))
    try:
        root = sch.get_sblock("root")
    except s_tir.ScheduleError:  # hand-written TIR (TVM's cumsum, sort): leave it as written
        return func
    for block in sch.get_child_blocks(root):
        if _is_window_over_lanes(sch, block, lanes):
            for producer in sch.get_producers(block):  # the padded input, one pass fewer
                try:
                    sch.compute_inline(producer)
                except s_tir.ScheduleError:  # writes an output, or others read it too
                    pass
    _inline_elementwise_chains(sch, root)
    for block in sch.get_child_blocks(root):
        if _schedule_transpose(sch, block, lanes) or _schedule_full_reduction(sch, block, lanes):
            continue
        window = _is_window_over_lanes(sch, block, lanes)
        loops = sch.get_loops(block)
        iters = sch.get(block).iter_vars
        spatial = [loop for loop, it in zip(loops, iters) if it.iter_type == 0]  # data parallel
        if len(spatial) != len(loops[: len(spatial)]) or not spatial:
            continue
        if window:
            reductions, lane = loops[len(spatial):], spatial[-1]
            if _extent(sch, lane) > lanes:  # a row of several vectors (a sum over channels): one each
                vectors, lane = sch.split(lane, [None, lanes])
                spatial = [*spatial[:-1], vectors, lane]
            parallelize_leading(sch, spatial[:-1])
            sch.reorder(*reductions, lane)
            sch.vectorize(lane)
            continue
        parallelize_leading(sch, spatial[:-1])
        innermost = loops[-1]
        written = {str(region.source.dtype) for region in sch.get(block).writes}
        extent = _extent(sch, innermost)
        if written <= _VECTOR_DTYPES and len(loops) == len(spatial) and extent and extent >= lanes:
            vectorize_with_tail(sch, block, lanes)
    return sch.mod["main"]


def _schedule_transpose(sch: s_tir.Schedule, block, lanes: int) -> bool:
    """Tile a spatial block whose write's innermost index follows one loop (`written`) and
    whose reads' innermost index another (`read`) into squares of lanes (or half as many
    along an axis they do not divide, NCHW8c's): vector loads or stores along the side whose
    rows lie far apart, scalar ones within the other side's contiguous square. Vectorizing
    the loop innermost on one side alone makes every access of the other a scalar one a
    whole row apart, fifteen times the tiles' time. False if the block is not such a copy or no vector divides
    either extent."""
    stmt = sch.get(block)
    loops = sch.get_loops(block)
    if (not _spatial_only(sch, block) or len(loops) != len(stmt.iter_vars) or len(stmt.writes) != 1 or not stmt.reads
            or str(stmt.writes[0].source.dtype) not in _VECTOR_DTYPES):
        return False
    variables = [it.var for it in stmt.iter_vars]

    def innermost(region) -> int | None:  # the one loop the region's innermost index follows
        used = [i for i, v in enumerate(variables) if region.region and _step(region.region[-1].min, v) != 0]
        return used[0] if len(used) == 1 else None

    written = innermost(stmt.writes[0])
    read = {innermost(region) for region in stmt.reads}
    if written is None or len(read) != 1 or None in read or written in read:
        return False
    (read,) = read
    # A vector of lanes, or half of one (NCHW8c's blocks), along each axis of the tile; the
    # scalar side's last tile may be cut short (a [512, 3199] transpose: 3199 time steps), and
    # along a symbolic extent (None here) the vectors' last one, peeled (`PeelTileTails`).
    extents = {i: _extent(sch, loops[i]) for i in (written, read)}
    factors = {i: lanes if extent is None else next((f for f in (lanes, lanes // 2) if extent % f == 0), None)
               for i, extent in extents.items()}
    # Vectorize the loop whose partner's rows lie further apart where it is itself contiguous.
    apart_written, apart_read = _stride(stmt.writes[0], variables[read]), _stride(stmt.reads[0], variables[written])
    if apart_written is None or apart_read is None:
        return False
    preferred = [(written, read), (read, written)] if apart_written > apart_read else [(read, written), (written, read)]
    sides = next(((v, s) for v, s in preferred if factors[v] is not None and (extents[s] or lanes) >= lanes), None)
    if sides is None:
        return False
    vector, scalar = sides
    factors[scalar] = factors[scalar] or lanes
    outer, inner = {}, {}
    for i in (vector, scalar):
        outer[i], inner[i] = sch.split(loops[i], [None, factors[i]])
    ordered = [outer.get(i, loop) for i, loop in enumerate(loops)]
    parallel = ordered
    if extents[vector] is None:  # its tiles in turn within a task, so that the last can be peeled
        ordered = [loop for loop in ordered if loop != outer[vector]] + [outer[vector]]
        parallel = ordered[:-1]
        sch.annotate(block, PEEL_ATTR, True)
    sch.reorder(*ordered, inner[scalar], inner[vector])
    parallelize_leading(sch, parallel)
    sch.unroll(inner[scalar])
    sch.vectorize(inner[vector])
    return True


def _schedule_full_reduction(sch: s_tir.Schedule, block, lanes: int) -> bool:
    """Reduce a block that reduces over all its loops (a whole tensor to one value) into a
    vector of `lanes` partial results, each over every `lanes`-th value, then across them:
    one vector instruction per `lanes` values instead of one scalar one per value. False
    (the block left as it is) where it is not such a block, or `lanes` does not divide it."""
    stmt = sch.get(block)
    loops = sch.get_loops(block)
    if (not loops or len(loops) != len(stmt.iter_vars) or any(it.iter_type != 2 for it in stmt.iter_vars)
            or len(stmt.writes) != 1 or str(stmt.writes[0].source.dtype) not in _VECTOR_DTYPES):
        return False
    extent = 1
    for loop in loops:
        extent *= sch.get(loop).extent
    if not Analyzer().can_prove_equal(tirx.floormod(extent, lanes), 0):
        return False
    _, lane = sch.split(sch.fuse(*loops), [None, lanes])
    partial = sch.rfactor(lane, 0)
    sch.vectorize(sch.get_loops(partial)[-1])
    sch.decompose_reduction(partial, sch.get_loops(partial)[0])
    return True


def _step(index, var):
    """How much `index` moves when `var` goes from 0 to 1 (None if that depends on other variables)."""
    at = []
    for value in (0, 1):
        analyzer = Analyzer()
        analyzer.bind(var, tvm.tirx.const(value, var.ty.dtype))
        at.append(analyzer.simplify(index))
    step = Analyzer().simplify(at[1] - at[0])
    return int(step) if isinstance(step, tvm.tirx.IntImm) else None


def _stride(region, var) -> float | None:
    """How far apart in memory two neighbouring values of `var` are in `region`'s buffer:
    infinite across a symbolic dim, None if the index moves by other variables too."""
    stride, total = 1, 0
    for dim, index in reversed(list(zip(region.source.shape, region.region))):
        step = _step(index.min, var)
        if step is None:
            return None
        total += step * stride if step else 0
        stride = stride * int(dim) if isinstance(dim, tvm.tirx.IntImm) else math.inf
    return abs(total)


def _is_window_over_lanes(sch: s_tir.Schedule, block, lanes: int) -> bool:
    """A reduction whose innermost spatial axis, of a vector's extent or a multiple of `lanes`,
    is the innermost index of everything it reads and writes (a pool over NCHW{c}c lanes, a sum
    over the channels of a [N, C, W] tensor; not a softmax or norm that reduces along the
    innermost axis)."""
    stmt = sch.get(block)
    loops = sch.get_loops(block)
    kinds = [it.iter_type for it in stmt.iter_vars]
    if 2 not in kinds or kinds != sorted(kinds) or len(loops) != len(kinds) or len(stmt.writes) != 1:
        return False  # not spatial (0) then reduce (2) loops, or an argmax's pair of results
    lane = stmt.iter_vars[kinds.count(0) - 1].var
    regions = [*stmt.reads, *stmt.writes]
    extent = _extent(sch, loops[kinds.count(0) - 1])
    return extent is not None and (extent in (8, 16, 32) or extent % lanes == 0) and all(
        r.region and r.region[-1].min.same_as(lane) for r in regions)


def _extent(sch: s_tir.Schedule, loop) -> int | None:
    value = sch.get(loop).extent
    return int(value) if isinstance(value, tvm.tirx.IntImm) else None
