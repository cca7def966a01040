"""int8 NCHW{c}c convolution (`tvm_fuse.compute.conv_nchwc_int8`): the fp32 kernel's register
tile (`width_tile` pixels x `channel_tile` output blocks of 16 s32 accumulators, or 8 in a
ymm register for blocks of 8), with each step a 16 x 4 (8 x 4) u8 x s8 dot product
tensorized as VNNI's `vpdpbusd`, or on AVX-512 without VNNI
as `vpmaddubsw` + `vpmaddwd` (whose int16 sums the weights' 7-bit range keeps from
saturating, see `tvm_fuse.quantization.weights`), as the compute's block asks."""

from __future__ import annotations

import math
from dataclasses import dataclass

from tvm import s_tir

from ..compute import DOT_PRODUCT_ATTR
from ..compute.conv_nchwc_int8 import OUT_BLOCK, QUAD
from .common import divisor, static_extent
from .conv_nchwc import default_register_tile, register_tiles
from .conv_nchwc_dot import schedule_dot_product_conv
from .intrinsics import dot_product


@dataclass(frozen=True)
class ConvNCHWcInt8Knobs:
    width_tile: int  # output pixels of a row accumulated together
    channel_tile: int = 1  # output channel blocks accumulated together


def default_knobs(sch: s_tir.Schedule, block, lanes: int) -> ConvNCHWcInt8Knobs:
    """Measured on ResNet-50's layers: rows of 28 pixels or more ran fastest in 4 x 4 tiles,
    as the fp32 conv's 7 x 4 tile, its 4 weight vectors and the broadcast input need 33 zmm
    registers, and the spill cost 10-35%; but where those 4 channel blocks' weights pass
    `_TILE_WEIGHT_BYTES` in a conv whose neighbouring tiles share no input rows (1x1 and
    strided convs: the 512-channel 1x1s at 28x28, the stride-2 3x3), in 14 x 2 (ResNet-50 int8
    1.4-1.8% faster, two A/B runs). Rows of 7 in 7 x 4, which spills as well but has no better
    tile; other rows in the fp32 conv's tile."""
    loops = sch.get_loops(block)
    chunks, width = (static_extent(sch.get(loops[axis]).extent) for axis in (1, 3))
    if width >= 28 and width % 4 == 0:
        channel_tile = divisor(chunks, (4, 2, 1))
        if channel_tile == 4 and width % 14 == 0 and _tile_weight_bytes(sch, block, 4) > _TILE_WEIGHT_BYTES \
                and not _reuses_input_rows(sch, block):
            return ConvNCHWcInt8Knobs(14, 2)
        return ConvNCHWcInt8Knobs(4, channel_tile)
    if 0 < width <= 7:
        return ConvNCHWcInt8Knobs(width, divisor(chunks, (4, 2, 1)))
    return ConvNCHWcInt8Knobs(*default_register_tile(sch, block, lanes))


_TILE_WEIGHT_BYTES = 16 * 1024


def _tile_weight_bytes(sch: s_tir.Schedule, block, channel_tile: int) -> int:
    """Bytes of weights a tile of `channel_tile` output blocks reads: per block, 16 lanes x 4
    bytes for each input quad and tap."""
    reduction = [static_extent(sch.get(loop).extent) for loop in sch.get_loops(block)[5:9]]  # ic, ky, kx, iq
    return channel_tile * math.prod(reduction) * OUT_BLOCK * QUAD


def _reuses_input_rows(sch: s_tir.Schedule, block) -> bool:
    """Whether the conv has taps over a stride-1 input (a 3x3 stride-1 conv, not a 1x1 or a
    strided one): its input width (padded) is under twice its output's."""
    loops = sch.get_loops(block)
    taps = [static_extent(sch.get(loops[axis]).extent) for axis in (6, 7)]
    data = sch.get(block).reads[0].source
    return taps != [1, 1] and int(data.shape[3]) < 2 * static_extent(sch.get(loops[3]).extent)


def knob_space(sch: s_tir.Schedule, block, lanes: int) -> list[ConvNCHWcInt8Knobs]:
    return [ConvNCHWcInt8Knobs(w, c) for w, c in register_tiles(sch, block, lanes)]


def schedule(sch: s_tir.Schedule, block, lanes: int, knobs: ConvNCHWcInt8Knobs | None = None) -> None:
    knobs = knobs or default_knobs(sch, block, lanes)
    vnni = str(sch.get(block).annotations.get(DOT_PRODUCT_ATTR, "vnni")) == "vnni"
    schedule_dot_product_conv(sch, block, knobs.width_tile, knobs.channel_tile, lambda n: dot_product(n, vnni), lanes)
