"""bf16 Winograd F(m x m, 3 x 3) convolution in NCHW{c}c: `winograd_nchwc`'s transforms in
fp32, the transformed input rounded to bf16 as it is stored, and the product over the input
channels as bf16 pair dot products summed in fp32 (AVX512-BF16's `vdpbf16ps`), against
transformed weights rounded to bf16 and packed in pairs at build time. The product's 2x rate
on top of Winograd's fewer multiplications; the output transform and the epilogue in fp32."""

from __future__ import annotations

import numpy as np
from tvm import te

from ..ir_names import DOT_PRODUCT_ATTR, SCHEDULE_RULE, WINOGRAD_NCHWC_BF16_RULE
from .bf16 import PAIR, from_bits, pack_pairs, to_bits
from .winograd_nchwc import transform_weight, winograd_input, winograd_output

# (smallest output side, tile m), as `winograd_nchwc.TILE_BY_OUTPUT_SIDE`: F(4x4) from 24x24 and
# F(2x2) from 12x12; where the product runs at bf16's 2x rate the transforms weigh more, and
# F(4x4) at 14x14 lost on narrow convs. Convs of `BF16_WIDE_CHANNELS` output channels or more
# take F(2x2) down to 7x7, narrower ones lost by it (performance log).
BF16_TILE_BY_OUTPUT_SIDE = ((24, 4), (12, 2))
BF16_WIDE_TILE_BY_OUTPUT_SIDE = (*BF16_TILE_BY_OUTPUT_SIDE, (7, 2))
BF16_WIDE_CHANNELS = 256


def transform_weight_bf16(weight: np.ndarray, tile: int) -> np.ndarray:
    """OIHW{c}i{c}o 3x3 weights (c even) as bf16 bits [alpha, alpha, O, I, {c/2}i, {c}o, 2]:
    `transform_weight`'s G g G^T, two consecutive input channels in each 32-bit word."""
    return pack_pairs(transform_weight(weight, tile))


def conv2d_winograd_nchwc_bf16(data: te.Tensor, weight: te.Tensor, padding, tile: int,
                               native: bool = True) -> te.Tensor:
    """The stride-1, undilated 3x3 conv of fp32 or bf16-bits `data` with weights from
    `transform_weight_bf16`, in fp32. `native`: tensorized with `vdpbf16ps`, else its
    portable form."""
    inputs = winograd_input(data, padding, tile, to_bits)
    alpha, _, batch, in_chunks, tiles, _ = inputs.shape
    *_, out_chunks, _, in_pairs, out_block, pair = weight.shape
    ic = te.reduce_axis((0, in_chunks), name="ic")
    ip = te.reduce_axis((0, in_pairs), name="ip")
    p = te.reduce_axis((0, pair), name="p")
    product = te.compute(
        (alpha, alpha, batch, out_chunks, tiles, out_block),
        lambda eps, nu, n, oc, t, ob: te.sum(
            from_bits(inputs[eps, nu, n, ic, t, ip * PAIR + p]) * from_bits(weight[eps, nu, oc, ic, ip, ob, p]),
            axis=[ic, ip, p]),
        name="winograd_product",
        attrs={SCHEDULE_RULE: WINOGRAD_NCHWC_BF16_RULE, DOT_PRODUCT_ATTR: "vdpbf16ps" if native else "portable"})
    return winograd_output(product, data, padding, tile)
