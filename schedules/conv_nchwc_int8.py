"""int8 NCHW{c}c convolution (`tvm_fuse.compute.conv_nchwc_int8`): the fp32 kernel's register
tile (`width_tile` pixels x `channel_tile` output blocks of 16 s32 accumulators, or 8 in a
ymm register for blocks of 8), with each step a 16 x 4 (8 x 4) u8 x s8 dot product
tensorized as VNNI's `vpdpbusd`, or on AVX-512 without VNNI
as `vpmaddubsw` + `vpmaddwd` (whose int16 sums the weights' 7-bit range keeps from
saturating, see `tvm_fuse.quantization.weights`), as the compute's block asks."""

from __future__ import annotations

from tvm import s_tir

from ..ir_names import DOT_PRODUCT_ATTR
from .conv_nchwc_dot import DotProductConvKnobs, schedule_dot_product_conv
from .intrinsics import dot_product


def schedule(sch: s_tir.Schedule, block, lanes: int, knobs: DotProductConvKnobs | None = None) -> None:
    vnni = str(sch.get(block).annotations.get(DOT_PRODUCT_ATTR, "vnni")) == "vnni"
    schedule_dot_product_conv(sch, block, lanes, knobs, lambda n: dot_product(n, vnni))
