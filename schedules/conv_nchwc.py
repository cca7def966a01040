"""Direct NCHW{c}c convolution (`tvm_fuse.compute.conv_nchwc`), the shape of NeoCPU's kernel:
a tile of `width_tile` output pixels (in `height_tile` rows of `batch_tile` images) x
`channel_tile` channel blocks (a vector register each) is accumulated in registers over every
input channel and kernel tap, each step one broadcast input scalar times one weight vector (an
FMA); output rows of each channel block run in parallel; the fused epilogue is applied to the
tile before it is stored."""

from __future__ import annotations

from dataclasses import dataclass

from tvm import s_tir

from ..compute.conv import WIDE_ROW
from .common import (
    accumulate_in_registers,
    accumulator_budget,
    conv_tasks,
    divisor,
    divisors,
    fullest_tile,
    inline_epilogue,
    parallel_tasks,
    prefetch_next_channels,
    rows_outermost,
    splits_channels,
    static_extent,
    store_tile,
)


@dataclass(frozen=True)
class ConvNCHWcKnobs:
    width_tile: int  # output pixels of a row accumulated together
    channel_tile: int = 1  # output channel blocks accumulated together: tile = width x channel registers
    unroll_kernel_width: bool = False  # unroll the kernel-width taps too
    height_tile: int = 1  # output rows accumulated together
    batch_tile: int = 1  # images accumulated together: tile = batch x height x width x channel registers


def default_register_tile(sch: s_tir.Schedule, block, lanes: int) -> tuple[int, int]:
    """(width_tile, channel_tile) for a conv block whose loops start n, chunk, y, x."""
    loops = sch.get_loops(block)
    chunks, width = (static_extent(sch.get(loops[axis]).extent) for axis in (1, 3))
    if lanes < 16:
        return fullest_tile(width, chunks, accumulator_budget(lanes, 28))
    # Up to 28 accumulators leaves registers for the weight vectors; wide rows take more
    # channel blocks. Over the benchmark CNNs' convs this lands within 8% of the best knobs
    # measured per layer (AVX-512). A wide row of an odd count of blocks takes 3 at a time
    # rather than one, whose every broadcast input feeds a single FMA.
    channel_tile = divisor(chunks, (4, 2, 3, 1) if width >= WIDE_ROW else (2, 1))
    return divisor(width, range(min(14, 28 // channel_tile), 0, -1)), channel_tile


def register_tiles(sch: s_tir.Schedule, block, lanes: int) -> list[tuple[int, int]]:
    """Every (width_tile, channel_tile) within the accumulator budget the loop extents divide."""
    loops = sch.get_loops(block)
    chunks, width = (sch.get(loops[axis]).extent for axis in (1, 3))
    budget = accumulator_budget(lanes, 28)
    return [(w, c) for c in divisors(chunks, 4) for w in divisors(width, 16) if w * c <= budget]


def default_knobs(sch: s_tir.Schedule, block, lanes: int) -> ConvNCHWcKnobs:
    width_tile, channel_tile = default_register_tile(sch, block, lanes)
    if width_tile * channel_tile >= 8:
        return ConvNCHWcKnobs(width_tile, channel_tile)
    # A narrow map (a column, a 3x3 or 1x1 map, a row of prime width) leaves too few
    # accumulators in a row to hide the FMAs' latency: the tile takes several rows, then
    # several images of the batch.
    batch, chunks, height = (sch.get(loop).extent for loop in sch.get_loops(block)[:3])
    channel_tile = divisor(chunks, (4, 2, 1))
    budget = accumulator_budget(lanes, 28) // (width_tile * channel_tile)
    height_tile = divisor(height, range(min(budget, 14), 0, -1))
    batch_tile = divisor(batch, range(min(budget // height_tile, 14), 0, -1))
    return ConvNCHWcKnobs(width_tile, channel_tile, height_tile=height_tile, batch_tile=batch_tile)


@dataclass(frozen=True)
class DepthwiseNCHWcKnobs:
    width_tile: int  # output pixels of a row accumulated together
    unroll_taps: bool = False  # unroll the kernel taps, so that neighbouring taps share loads
    inline_padding: bool = False  # read the input with bounds checks instead of a padded copy


def default_depthwise_knobs(sch: s_tir.Schedule, block, lanes: int) -> DepthwiseNCHWcKnobs:
    # Reading the input with bounds checks, not from a padded copy as large as the input:
    # these layers are bound by memory (half the time over MobileNetV2's). A few pixels a
    # tile with the taps unrolled, so that neighbouring taps share their input loads: within
    # 20% of the best knobs on 3x3, 5x5 and 7x7 kernels, where one pixel a tile was 1.1-2.4x
    # slower, most where the kernel is large.
    width = sch.get(sch.get_loops(block)[3]).extent
    return DepthwiseNCHWcKnobs(width_tile=divisor(width, (4, 2, 1)), unroll_taps=True, inline_padding=True)


def knob_space(sch: s_tir.Schedule, block, lanes: int) -> list[ConvNCHWcKnobs]:
    """Every register tile (`register_tiles`), with and without the kernel width unrolled."""
    loops = sch.get_loops(block)
    batch, height, kernel_w = (sch.get(loops[axis]).extent for axis in (0, 2, 7))
    unrolls = (False, True) if static_extent(kernel_w) > 1 else (False,)
    budget = accumulator_budget(lanes, 28)
    return [ConvNCHWcKnobs(w, c, u, h, b) for w, c in register_tiles(sch, block, lanes) for u in unrolls
            for h in divisors(height, budget // (w * c)) for b in divisors(batch, budget // (w * c * h))]


def depthwise_knob_space(sch: s_tir.Schedule, block, lanes: int) -> list[DepthwiseNCHWcKnobs]:
    width = sch.get(sch.get_loops(block)[3]).extent
    return [DepthwiseNCHWcKnobs(w, u, p) for w in divisors(width, 16) for u in (False, True) for p in (False, True)]


def schedule(sch: s_tir.Schedule, block, lanes: int, knobs: ConvNCHWcKnobs | None = None) -> None:
    knobs = knobs or default_knobs(sch, block, lanes)
    epilogue = inline_epilogue(sch, block)
    split_channels = splits_channels(sch, block)
    for pad in sch.get_producers(block):  # split as the conv's tasks are
        sch.parallel(sch.fuse(*(sch.get_loops(pad) if split_channels else rows_outermost(sch, pad))[:2]))
    n, chunk, y, x, lane, ic, ky, kx, ib = sch.get_loops(block)
    chunk_out, chunk_in = sch.split(chunk, [None, knobs.channel_tile])
    n_out, n_in = sch.split(n, [None, knobs.batch_tile])
    y_out, y_in = sch.split(y, [None, knobs.height_tile])
    x_out, x_in = sch.split(x, [None, knobs.width_tile])
    # Each broadcast input feeds channel_tile FMAs, each weight vector batch x height x width_tile FMAs.
    tasks = conv_tasks(split_channels, n_out, chunk_out, [y_out])
    sch.reorder(*tasks, x_out, ic, ky, kx, ib, n_in, y_in, x_in, chunk_in, lane)
    if split_channels:
        prefetch_next_channels(sch, block, ic, [chunk_out], [n_out, y_out], knobs.channel_tile)
    parallel_tasks(sch, tasks)
    unrolled = [chunk_in, x_in, y_in, n_in] + ([kx] if knobs.unroll_kernel_width else [])
    write_back = accumulate_in_registers(sch, block, x_out, unrolled, lane, ic, lanes)
    store_tile(sch, write_back, epilogue, x_out, lanes)


def schedule_depthwise(sch: s_tir.Schedule, block, lanes: int, knobs: DepthwiseNCHWcKnobs | None = None) -> None:
    knobs = knobs or default_depthwise_knobs(sch, block, lanes)
    epilogue = inline_epilogue(sch, block)
    for pad in sch.get_producers(block):
        for widening in sch.get_producers(pad):  # bf16 data, widened as it is padded
            sch.compute_inline(widening)
        if knobs.inline_padding:
            sch.compute_inline(pad)
        else:
            sch.parallel(sch.fuse(*rows_outermost(sch, pad)[:2]))
    # Rows outermost, as a conv with small weights splits them (`common.splits_channels`).
    n, chunk, y, x, lane, ky, kx = sch.get_loops(block)
    x_out, x_in = sch.split(x, [None, knobs.width_tile])
    sch.reorder(n, y, chunk, x_out, ky, kx, x_in, lane)
    parallel_tasks(sch, [n, y, chunk])
    unrolled = [x_in] + ([ky, kx] if knobs.unroll_taps else [])
    write_back = accumulate_in_registers(sch, block, x_out, unrolled, lane, ky, lanes)
    store_tile(sch, write_back, epilogue, x_out, lanes)
