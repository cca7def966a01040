"""int8 NCHW{c}c convolution (`tvm_fuse.compute.conv_nchwc_int8`): the fp32 kernel's register
tile (`width_tile` pixels x `channel_tile` output blocks of 16 s32 accumulators, or 8 in a
ymm register for blocks of 8), with each step a 16 x 4 (8 x 4) u8 x s8 dot product
tensorized as VNNI's `vpdpbusd`, or on AVX-512 without VNNI
as `vpmaddubsw` + `vpmaddwd` (whose int16 sums the weights' 7-bit range keeps from
saturating, see `tvm_fuse.quantization.weights`), as the compute's block asks."""

from __future__ import annotations

from dataclasses import dataclass

from tvm import s_tir

from ..compute.conv_nchwc_int8 import DOT_PRODUCT_ATTR
from .common import accumulate_in_registers, divisor, static_extent, store_tile
from .conv_nchwc import default_register_tile, register_tiles
from .intrinsics import dot_product


@dataclass(frozen=True)
class ConvNCHWcInt8Knobs:
    width_tile: int  # output pixels of a row accumulated together
    channel_tile: int = 1  # output channel blocks accumulated together


def default_knobs(sch: s_tir.Schedule, block, lanes: int) -> ConvNCHWcInt8Knobs:
    """Measured on ResNet-50's layers (warm): rows of 28 pixels or more ran fastest in 4 x 4
    tiles, as the fp32 conv's 7 x 4 tile, its 4 weight vectors and the broadcast input need
    33 zmm registers, and the spill cost 10-35%; rows of 7 in 7 x 4, which spills as well but
    has no better tile; other rows in the fp32 conv's tile."""
    loops = sch.get_loops(block)
    chunks, width = (static_extent(sch.get(loops[axis]).extent) for axis in (1, 3))
    if width >= 28 and width % 4 == 0:
        return ConvNCHWcInt8Knobs(4, divisor(chunks, (4, 2, 1)))
    if 0 < width <= 7:
        return ConvNCHWcInt8Knobs(width, divisor(chunks, (4, 2, 1)))
    return ConvNCHWcInt8Knobs(*default_register_tile(sch, block))


def knob_space(sch: s_tir.Schedule, block, lanes: int) -> list[ConvNCHWcInt8Knobs]:
    return [ConvNCHWcInt8Knobs(w, c) for w, c in register_tiles(sch, block)]


def schedule(sch: s_tir.Schedule, block, lanes: int, knobs: ConvNCHWcInt8Knobs | None = None) -> None:
    knobs = knobs or default_knobs(sch, block, lanes)
    epilogue = _inline_elementwise(sch, block)
    for pad in sch.get_producers(block):
        sch.parallel(sch.fuse(*sch.get_loops(pad)[:2]))
    n, chunk, y, x, lane, ic, ky, kx, iq, q = sch.get_loops(block)
    chunk_out, chunk_in = sch.split(chunk, [None, knobs.channel_tile])
    x_out, x_in = sch.split(x, [None, knobs.width_tile])
    sch.reorder(n, chunk_out, y, x_out, ic, ky, kx, iq, x_in, chunk_in, lane, q)
    sch.parallel(sch.fuse(n, chunk_out, y))
    write_back = accumulate_in_registers(sch, block, x_out, [chunk_in, x_in], None, ic, lanes)
    vnni = str(sch.get(block).annotations.get(DOT_PRODUCT_ATTR, "vnni")) == "vnni"
    sch.tensorize(lane, dot_product(static_extent(sch.get(lane).extent), vnni))
    store_tile(sch, write_back, epilogue, x_out, lanes, unroll=True)


def _inline_elementwise(sch: s_tir.Schedule, anchor):
    """Inline every elementwise stage into the last one, which writes the output, and return
    it (None if the anchor writes it): the epilogue after the anchor, and before it the
    dequantization of a u8 residual."""
    pads = [sch.get(p) for p in sch.get_producers(anchor)]
    blocks = list(sch.get_child_blocks(sch.get_sblock("root")))
    if sch.get(blocks[-1]).same_as(sch.get(anchor)):
        return None
    for stage in blocks[:-1]:
        if not sch.get(stage).same_as(sch.get(anchor)) and not any(sch.get(stage).same_as(p) for p in pads):
            sch.compute_inline(stage)
    return blocks[-1]
