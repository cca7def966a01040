"""Direct NCHW{c}c convolution (`tvm_fuse.compute.conv_nchwc`), the shape of NeoCPU's kernel:
a row tile of `width_tile` output pixels x one channel block (a vector register each) is
accumulated in registers over every input channel and kernel tap, each step one broadcast
input scalar times one weight vector (an FMA); output rows of each channel block run in
parallel; the fused epilogue is applied to the tile before it is stored."""

from __future__ import annotations

from dataclasses import dataclass

from tvm import s_tir

from .common import divisor, inline_epilogue, vectorize_innermost


@dataclass(frozen=True)
class ConvNCHWcKnobs:
    width_tile: int  # output pixels accumulated together: width_tile vector registers
    unroll_kernel_width: bool  # unroll the kernel-width taps too


def default_knobs(sch: s_tir.Schedule, block, lanes: int) -> ConvNCHWcKnobs:
    width = sch.get(sch.get_loops(block)[3]).extent
    # Up to 16 accumulators leaves registers for the weight vector and the broadcasts.
    return ConvNCHWcKnobs(divisor(width, range(16, 0, -1)), unroll_kernel_width=False)


def _registers(sch: s_tir.Schedule, block, tile_loop, lanes: int):
    """Accumulate `block` in a local tile under `tile_loop` and return the write-back block."""
    write_back = sch.cache_write(block, 0, "local")
    sch.reverse_compute_at(write_back, tile_loop)
    return write_back


def schedule(sch: s_tir.Schedule, block, lanes: int, knobs: ConvNCHWcKnobs | None = None) -> None:
    knobs = knobs or default_knobs(sch, block, lanes)
    epilogue = inline_epilogue(sch, block)
    for pad in sch.get_producers(block):
        sch.parallel(sch.fuse(*sch.get_loops(pad)[:2]))
    n, chunk, y, x, lane, ic, ky, kx, ib = sch.get_loops(block)
    x_out, x_in = sch.split(x, [None, knobs.width_tile])
    sch.reorder(n, chunk, y, x_out, ic, ky, kx, ib, x_in, lane)
    sch.parallel(sch.fuse(n, chunk, y))
    write_back = _registers(sch, block, x_out, lanes)
    sch.vectorize(lane)
    sch.unroll(x_in)
    if knobs.unroll_kernel_width:
        sch.unroll(kx)
    init = sch.decompose_reduction(block, ic)
    vectorize_innermost(sch, init, lanes)
    _store(sch, write_back, epilogue, x_out, lanes)


def schedule_depthwise(sch: s_tir.Schedule, block, lanes: int, knobs: ConvNCHWcKnobs | None = None) -> None:
    knobs = knobs or default_knobs(sch, block, lanes)
    epilogue = inline_epilogue(sch, block)
    for pad in sch.get_producers(block):
        sch.parallel(sch.fuse(*sch.get_loops(pad)[:2]))
    n, chunk, y, x, lane, ky, kx = sch.get_loops(block)
    x_out, x_in = sch.split(x, [None, knobs.width_tile])
    sch.reorder(n, chunk, y, x_out, ky, kx, x_in, lane)
    sch.parallel(sch.fuse(n, chunk, y))
    write_back = _registers(sch, block, x_out, lanes)
    sch.vectorize(lane)
    sch.unroll(x_in)
    init = sch.decompose_reduction(block, ky)
    vectorize_innermost(sch, init, lanes)
    _store(sch, write_back, epilogue, x_out, lanes)


def _store(sch: s_tir.Schedule, write_back, epilogue, tile_loop, lanes: int) -> None:
    """Write the register tile out, through the epilogue when there is one."""
    if epilogue is not None:
        sch.compute_inline(write_back)  # the epilogue reads the tile itself
        sch.reverse_compute_at(epilogue, tile_loop)
        vectorize_innermost(sch, epilogue, lanes)
    else:
        vectorize_innermost(sch, write_back, lanes)
