"""Direct NC[spatial] convolution (`tvm_fuse.compute.conv.convolution`): output channels tiled
in registers, the output row vectorized, (batch, channel tile) in parallel, the fused epilogue
computed per output row right after the row's reduction while it is hot in cache."""

from __future__ import annotations

from dataclasses import dataclass

from tvm import s_tir

from .common import divisor, divisors, inline_epilogue, vectorize_innermost


@dataclass(frozen=True)
class ConvKnobs:
    width_vector: int  # output columns per vector (split of the innermost spatial axis)
    channel_tile: int  # output channels accumulated together


def default_knobs(sch: s_tir.Schedule, block, lanes: int) -> ConvKnobs:
    loops = sch.get_loops(block)
    rank = (len(loops) - 3) // 2
    width, channels = sch.get(loops[1 + rank]).extent, sch.get(loops[1]).extent
    return ConvKnobs(divisor(width, [lanes >> s for s in range(lanes.bit_length())]), divisor(channels, [4, 2]))


def knob_space(sch: s_tir.Schedule, block, lanes: int) -> list[ConvKnobs]:
    loops = sch.get_loops(block)
    rank = (len(loops) - 3) // 2
    width, channels = sch.get(loops[1 + rank]).extent, sch.get(loops[1]).extent
    return [ConvKnobs(w, c) for w in divisors(width, lanes) for c in divisors(channels, 8)]


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
    width_out, width_in = sch.split(spatial[-1], [None, knobs.width_vector])
    sch.reorder(batch, channel_out, *spatial[:-1], width_out, *reduction, channel_in, width_in)
    outer = sch.fuse(batch, channel_out)
    sch.parallel(outer)
    sch.unroll(channel_in)
    vector = knobs.width_vector > 1  # an output width of 1 leaves no row to vectorize
    if vector:
        sch.vectorize(width_in)
    init = sch.decompose_reduction(block, reduction[0])
    if vector:
        vectorize_innermost(sch, init, lanes)
    if epilogue is not None:
        sch.reverse_compute_at(epilogue, spatial[0] if rank == 2 else outer)
        if vector:
            vectorize_innermost(sch, epilogue, lanes)
