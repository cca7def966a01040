"""Direct NC[spatial] convolution (`tvm_fuse.compute.conv.convolution`): a register tile of
`channel_tile` output channels x `width_vectors` vectors of the output row is accumulated over
every input channel and kernel tap, each step one row vector of the input times a broadcast
weight; (batch, channel tile) in parallel, and the rows where those are few; the fused epilogue
is applied to the tile before it is stored. The compute rounds long rows up to whole vectors,
so the row splits without a tail."""

from __future__ import annotations

import math
from dataclasses import dataclass

from tvm import s_tir

from .common import (
    PARALLEL_MIN,
    accumulate_in_registers,
    accumulator_budget,
    divisor,
    divisors,
    inline_epilogue,
    parallel_tasks,
    static_extent,
    store_tile,
)


@dataclass(frozen=True)
class ConvKnobs:
    width_vector: int  # output columns per vector (split of the innermost spatial axis)
    channel_tile: int  # output channels accumulated together
    width_vectors: int = 1  # vectors of the row accumulated together: channel_tile x width_vectors registers


def _extents(sch: s_tir.Schedule, block) -> tuple[object, object]:
    """(output row width, output channels) of the conv `block`."""
    loops = sch.get_loops(block)
    rank = (len(loops) - 3) // 2
    return sch.get(loops[1 + rank]).extent, sch.get(loops[1]).extent


def default_knobs(sch: s_tir.Schedule, block, lanes: int) -> ConvKnobs:
    width, channels = _extents(sch, block)
    vector = divisor(width, [lanes >> s for s in range(lanes.bit_length())])
    # Up to 16 accumulators, channels first: each input vector feeds channel_tile FMAs.
    channel_tile = divisor(channels, (8, 6, 4, 3, 2))
    budget = accumulator_budget(lanes, 16) // channel_tile
    vectors = divisor(width // vector, range(max(budget, 1), 0, -1))
    return ConvKnobs(vector, channel_tile, vectors)


def knob_space(sch: s_tir.Schedule, block, lanes: int) -> list[ConvKnobs]:
    width, channels = _extents(sch, block)
    budget = accumulator_budget(lanes, 24)
    return [ConvKnobs(w, c, v) for w in divisors(width, lanes) for c in divisors(channels, 8)
            for v in divisors(static_extent(width) // w if static_extent(width) else 1, 4) if c * v <= budget]


def schedule(sch: s_tir.Schedule, block, lanes: int, knobs: ConvKnobs | None = None) -> None:
    knobs = knobs or default_knobs(sch, block, lanes)
    epilogue = inline_epilogue(sch, block)
    for pad in sch.get_producers(block):  # the zero-padded input
        sch.parallel(sch.get_loops(pad)[1])
    loops = sch.get_loops(block)
    rank = (len(loops) - 3) // 2
    batch, channel, spatial = loops[0], loops[1], loops[2:2 + rank]
    reduction = loops[2 + rank:]
    channel_out, channel_in = sch.split(channel, [None, knobs.channel_tile])
    width_out, width_vector, width_in = sch.split(spatial[-1], [None, knobs.width_vectors, knobs.width_vector])
    sch.reorder(batch, channel_out, *spatial[:-1], width_out, *reduction, channel_in, width_vector, width_in)
    tasks = [batch, channel_out]
    if math.prod(static_extent(sch.get(loop).extent) for loop in tasks) < PARALLEL_MIN:  # few channels: rows too
        tasks += spatial[:-1]
    parallel_tasks(sch, tasks)
    # An output width of 1 leaves no row to vectorize.
    lane = width_in if knobs.width_vector > 1 else None
    unrolled = [channel_in, width_vector] + ([width_in] if lane is None else [])
    write_back = accumulate_in_registers(sch, block, width_out, unrolled, lane, reduction[0], lanes)
    store_tile(sch, write_back, epilogue, width_out, lanes)
