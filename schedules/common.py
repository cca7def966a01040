"""Steps shared by the schedules: find the anchor, inline the epilogue, pick split factors."""

from __future__ import annotations

import math

import tvm
import tvm_ffi
from tvm import s_tir, tirx
from tvm.sym import Analyzer

from ..ir_names import PEEL_ATTR, PREFETCH_ATTR, SCHEDULE_RULE


def anchor_block(sch: s_tir.Schedule):
    """(block, rule) of the block tagged with a schedule rule, or None."""
    for block in sch.get_child_blocks(sch.get_sblock("root")):
        rule = sch.get(block).annotations.get(SCHEDULE_RULE)
        if rule is not None:
            return block, str(rule)
    return None


def inline_epilogue(sch: s_tir.Schedule, anchor) -> object | None:
    """Inline the elementwise stages after `anchor` into the last one; return that last
    stage (None if the anchor writes the output itself)."""
    blocks = list(sch.get_child_blocks(sch.get_sblock("root")))
    position = next(i for i, b in enumerate(blocks) if sch.get(b).same_as(sch.get(anchor)))
    stages = blocks[position + 1:]  # elementwise, in order; the last writes the output
    for stage in stages[:-1]:
        sch.compute_inline(stage)
    return stages[-1] if stages else None


def static_extent(extent) -> int:
    """A loop extent as an int (0 when symbolic, such as a dynamic batch)."""
    value = getattr(extent, "value", extent)
    return value if isinstance(value, int) else 0


def accumulate_in_registers(sch: s_tir.Schedule, block, tile_loop, unrolled, lane, first_reduction, lanes: int):
    """Accumulate `block` in a local tile under `tile_loop`: the tile's loops `unrolled`, `lane`
    vectorized (None: the caller tensorizes it), and the tile's zeroing split off before
    `first_reduction` and vectorized. Return the block writing the tile back."""
    write_back = sch.cache_write(block, 0, "local")
    sch.reverse_compute_at(write_back, tile_loop)
    if lane is not None:
        sch.vectorize(lane)
    for loop in unrolled:
        sch.unroll(loop)
    init = sch.decompose_reduction(block, first_reduction)
    vectorize_innermost(sch, init, lanes)
    return write_back


def compute_at_group(sch: s_tir.Schedule, sums, group_loop) -> list:
    """Compute `sums` (a group's s32 sums, which the reader scales into its fp32 tile) at the
    reader's `group_loop`, in a local buffer; return its loops under that loop (a loop of
    extent 1, the group's own, is gone)."""
    sch.compute_at(sums, group_loop)
    sch.set_scope(sums, 0, "local")
    loops = sch.get_loops(sums)
    depth = next(i for i, loop in enumerate(loops) if sch.get(loop).same_as(sch.get(group_loop)))
    return loops[depth + 1:]


def store_tile(sch: s_tir.Schedule, write_back, epilogue, tile_loop, lanes: int, unroll: bool = False) -> None:
    """Write a register tile out, through the epilogue when there is one. `unroll`: unroll
    the tile's loops, so that every read of the tile has a constant index and LLVM keeps all
    of it in registers; in a loop, the tile also lives in memory, zeroed by a memset per tile
    (which costs the int8 conv's short reductions more than the fp32 conv's)."""
    if epilogue is not None:
        sch.compute_inline(write_back)  # the epilogue reads the tile itself
        sch.reverse_compute_at(epilogue, tile_loop)
        write_back = epilogue
    sch.annotate(write_back, PEEL_ATTR, True)  # a row rounded up to whole tiles: vector stores but at its end
    vectorize_innermost(sch, write_back, lanes)
    if unroll:
        loops = sch.get_loops(write_back)
        depth = next(i for i, loop in enumerate(loops) if sch.get(loop).same_as(sch.get(tile_loop)))
        for loop in loops[depth + 1:-1]:
            sch.unroll(loop)


class UnboundedTileError(ValueError):
    """A schedule left a `local` buffer (a register tile) of symbolic size."""


# TVM's first lowering steps, which size each buffer to the region its accesses cover.
_COMPACT = tvm.transform.Sequential([s_tir.transform.LowerInitBlock(),
                                     s_tir.transform.PlanAndUpdateBufferAllocationLocation(),
                                     s_tir.transform.ConvertBlocksToOpaque(),
                                     s_tir.transform.CompactBufferAllocation(),
                                     s_tir.transform.LowerOpaqueBlock()])


def check_tiles_bounded(func: tirx.PrimFunc) -> None:
    """Raise `UnboundedTileError` if a `local` buffer of the scheduled `func`, once TVM sizes
    it to the region it holds, has a symbolic shape: a register tile whose bounds TVM's region
    analysis lost, then sized as the whole output and stored through guards that no longer
    hold (out of bounds)."""
    unbounded = []

    def visit(alloc: tirx.AllocBuffer) -> None:
        buffer = alloc.buffer
        if buffer.scope() == "local" and not all(isinstance(extent, tirx.IntImm) for extent in buffer.shape):
            unbounded.append(buffer.name)

    tvm_ffi.structural_walk(_COMPACT(tvm.IRModule({"main": func}))["main"].body, (tirx.AllocBuffer, visit))
    if unbounded:
        raise UnboundedTileError(f"local buffers of symbolic size: {', '.join(unbounded)}")


def divides(factor: int, extent) -> bool:
    """Whether `factor` divides `extent`, provably: for a symbolic extent only when it is built
    as a multiple (a row count padded to whole tiles, `compute.matmul.padded`)."""
    value = static_extent(extent)
    if value:
        return value % factor == 0
    return isinstance(extent, tvm.ir.expr.Expr) and Analyzer().can_prove(tirx.floormod(extent, factor) == 0)


def divisor(extent, choices) -> int:
    """The first of `choices` that divides `extent` (1 if none does)."""
    return next((c for c in choices if divides(c, extent)), 1)


PARALLEL_MIN = 64  # fuse leading loops until there is this much parallel work

# Weights above this many bytes stream from L3 on every call: a conv's tasks then split its
# output channels between the cores, each reading half of them. Below it they split the image,
# so each core's output rows stay in its L2 for the next conv, which reads the same rows.
CHANNEL_SPLIT_WEIGHT_BYTES = 1 << 20


def splits_channels(sch: s_tir.Schedule, block) -> bool:
    """Whether the conv `block`'s tasks split its output channels (its weights, the block's
    second read, are larger than `CHANNEL_SPLIT_WEIGHT_BYTES`) rather than its rows."""
    weight = sch.get(block).reads[1].source
    size = tvm.DataType(str(weight.dtype)).bits // 8
    for extent in weight.shape:
        size *= int(extent)
    return size > CHANNEL_SPLIT_WEIGHT_BYTES


def conv_tasks(split_channels: bool, images, groups, rows: list) -> list:
    """A conv's parallel task loops, outermost first: a group of output channel blocks over
    every image and row in turn where its weights are split (so each group's weights are read
    once for the whole batch), else images, rows, then groups."""
    return [groups, images, *rows] if split_channels else [images, *rows, groups]


def parallel_tasks(sch: s_tir.Schedule, tasks: list):
    """Fuse the nested loops `tasks` (outermost first) into one parallel loop and return it.
    Of loops of symbolic extent only the innermost is fused, first, so that every task index
    is split off by a constant (the rest run in turn around it): a tile computed under a loop
    fused from two symbolic extents lost its bounds in TVM's region analysis (a tile as large
    as the output, stored out of bounds)."""
    symbolic = [loop for loop in tasks if not static_extent(sch.get(loop).extent)]
    fused = symbolic[-1:] + [loop for loop in tasks if static_extent(sch.get(loop).extent)]
    if symbolic:
        sch.reorder(*symbolic[:-1], *fused)
    loop = sch.fuse(*fused) if len(fused) > 1 else fused[0]
    sch.parallel(loop)
    return loop


def prefetch_next_channels(sch: s_tir.Schedule, block, reduction, strips, tiles, channel_tile: int,
                           chunk_axis: int = 0) -> None:
    """Mark `reduction` of a product whose tiles (`tiles` loops: images, rows) run a group of
    `channel_tile` output channel blocks (the weight's `chunk_axis`) in turn, group after group
    (`strips` loops): the tiles of a group prefetch the next group's weights
    (`transform.prefetch_next_strip`)."""
    strip_count = math.prod(static_extent(sch.get(loop).extent) for loop in strips)
    extents = [static_extent(sch.get(loop).extent) for loop in tiles]
    if strip_count and (0 in extents or math.prod(extents) > 1):  # one tile alone has no others to share a group
        weight = sch.get(block).reads[1].source
        group = channel_tile * math.prod(int(extent) for extent in weight.shape[chunk_axis + 1:])
        sch.annotate(reduction, PREFETCH_ATTR, [strip_count, group])


def rows_outermost(sch: s_tir.Schedule, block) -> list:
    """The loops of an NCHW{c}c `block` ([batch, channel blocks, rows, ...]) with the rows moved
    above the channel blocks, for a pass split between the cores as a conv that splits rows."""
    loops = sch.get_loops(block)
    sch.reorder(loops[2], loops[1])
    return sch.get_loops(block)


def parallelize_leading(sch: s_tir.Schedule, loops) -> None:
    """Fuse `loops` from the first until they hold `PARALLEL_MIN` iterations, into one parallel
    loop. A symbolic extent counts as that many, but the first loop's as one: most often a
    batch, of one image (SegFormer's symbolic build ran its transposes on one core)."""
    lead, extent = [], 1
    for loop in loops:
        lead.append(loop)
        extent *= static_extent(sch.get(loop).extent) or (PARALLEL_MIN if len(lead) > 1 else 1)
        if extent >= PARALLEL_MIN:
            break
    if lead:
        sch.parallel(sch.fuse(*lead) if len(lead) > 1 else lead[0])


def vectorize_innermost(sch: s_tir.Schedule, block, lanes: int) -> None:
    """Split the block's innermost loop by the widest of lanes, lanes/2, ... that divides it."""
    loop = sch.get_loops(block)[-1]
    factor = divisor(sch.get(loop).extent, [lanes >> s for s in range(lanes.bit_length())])
    if factor > 1:
        _, inner = sch.split(loop, [None, factor])
        sch.vectorize(inner)


def vectorize_with_tail(sch: s_tir.Schedule, block, lanes: int) -> None:
    """Split the block's innermost loop into vectors of `lanes`, the last one cut short where
    `lanes` does not divide it (`PeelTileTails` splits that one off, so that the rest are whole
    vectors); a loop shorter than a vector or of a symbolic extent as `vectorize_innermost`."""
    loop = sch.get_loops(block)[-1]
    extent = static_extent(sch.get(loop).extent)
    if extent < lanes or extent % lanes == 0:
        vectorize_innermost(sch, block, lanes)
        return
    _, inner = sch.split(loop, [None, lanes])
    sch.vectorize(inner)
    sch.annotate(block, PEEL_ATTR, True)


def accumulator_budget(lanes: int, budget: int) -> int:
    """`budget` accumulator vectors where there are 32 vector registers (AVX-512), at most 12
    of AVX2's 16: the weight vectors and the broadcast input need the rest."""
    return budget if lanes >= 16 else min(budget, 12)


def fullest_tile(width, chunks, budget: int) -> tuple[int, int]:
    """(width_tile, channel_tile) with the most accumulators within `budget`, the most channel
    blocks first among equals: a tile of few accumulators waits on its FMAs' latency. Measured
    per kernel on an AVX2 host, ResNet-18's convs (direct and Winograd) total within 3% of
    their best tiles and PP-OCRv4 rec's 240-channel 1x1s take their best tile; the AVX-512
    rule's 28-accumulator tiles spilled there and ran 1.3-1.9x slower."""
    tiles = [(divisor(width, range(min(14, budget // c), 0, -1)), c)
             for c in (4, 3, 2, 1) if divisor(chunks, [c]) == c]
    return max(tiles, key=lambda tile: tile[0] * tile[1])


def accumulator_tile(vectors, row_tile: int, lanes: int, budget: int = 16) -> int:
    """How many of `vectors` column vectors a tile of `row_tile` rows accumulates together:
    up to `budget` accumulators (12 on AVX2), and several even for one row, whose FMAs would
    otherwise wait on each other (measured on the benchmark models' dense layers and
    attention products)."""
    return divisor(vectors, range(min(5, accumulator_budget(lanes, budget) // row_tile), 0, -1))


def row_column_tiles(rows, vectors, lanes: int) -> list[tuple[int, int]]:
    """Every (row_tile, column_tile) of a product's register tile, `rows` rows x `vectors`
    column vectors, that the extents divide and the accumulator budget holds."""
    budget = accumulator_budget(lanes, 28)
    return [(r, c) for r in divisors(rows, 16) for c in divisors(vectors, 5) if r * c <= budget]


def divisors(extent, limit: int) -> list[int]:
    """The divisors of `extent` up to `limit`, ascending (of a symbolic extent, those it is
    built a multiple of)."""
    value = static_extent(extent)
    return [d for d in range(1, (min(value, limit) if value else limit) + 1) if divides(d, extent)]
