"""bf16 NCHW{c}c convolution (`tvm_fuse.compute.conv_nchwc_bf16`): the fp32 kernel's register
tile of fp32 accumulators, each step a 16 x 2 (8 x 2) bf16 pair dot product tensorized as
AVX512-BF16's `vdpbf16ps` (or its portable form, as the compute's block asks). The data is
rounded to bf16 as it is padded, in one pass before the tile loops."""

from __future__ import annotations

from dataclasses import dataclass

from tvm import s_tir

from ..ir_names import DOT_PRODUCT_ATTR
from .conv_nchwc import register_tiles
from .conv_nchwc_dot import default_dot_product_tile, schedule_dot_product_conv
from .intrinsics import bf16_dot_product


@dataclass(frozen=True)
class ConvNCHWcBf16Knobs:
    width_tile: int  # output pixels of a row accumulated together
    channel_tile: int = 1  # output channel blocks accumulated together


def default_knobs(sch: s_tir.Schedule, block, lanes: int) -> ConvNCHWcBf16Knobs:
    return ConvNCHWcBf16Knobs(*default_dot_product_tile(sch, block, lanes))


def knob_space(sch: s_tir.Schedule, block, lanes: int) -> list[ConvNCHWcBf16Knobs]:
    return [ConvNCHWcBf16Knobs(w, c) for w, c in register_tiles(sch, block, lanes)]


def schedule(sch: s_tir.Schedule, block, lanes: int, knobs: ConvNCHWcBf16Knobs | None = None) -> None:
    knobs = knobs or default_knobs(sch, block, lanes)
    native = str(sch.get(block).annotations.get(DOT_PRODUCT_ATTR, "vdpbf16ps")) == "vdpbf16ps"
    schedule_dot_product_conv(sch, block, knobs.width_tile, knobs.channel_tile,
                              lambda n: bf16_dot_product(n, native), lanes)
