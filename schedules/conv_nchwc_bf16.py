"""bf16 NCHW{c}c convolution (`tvm_fuse.compute.conv_nchwc_bf16`): the fp32 kernel's register
tile of fp32 accumulators, each step a 16 x 2 (8 x 2) bf16 pair dot product tensorized as
AVX512-BF16's `vdpbf16ps` (or its portable form, as the compute's block asks). The data is
rounded to bf16 as it is padded, in one pass before the tile loops."""

from __future__ import annotations

from tvm import s_tir

from ..ir_names import DOT_PRODUCT_ATTR
from .conv_nchwc_dot import DotProductConvKnobs, schedule_dot_product_conv
from .intrinsics import bf16_dot_product


def schedule(sch: s_tir.Schedule, block, lanes: int, knobs: DotProductConvKnobs | None = None) -> None:
    native = str(sch.get(block).annotations.get(DOT_PRODUCT_ATTR, "vdpbf16ps")) == "vdpbf16ps"
    schedule_dot_product_conv(sch, block, lanes, knobs, lambda n: bf16_dot_product(n, native))
