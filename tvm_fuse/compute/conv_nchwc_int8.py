"""int8 convolution in the blocked layout: u8 activations NCHW{c}c (c a multiple of 4) times
s8 weights OIHW{c/4}i{16}o4i, accumulated in s32 NCHW16c. Four consecutive input channels
are one 32-bit word, so one output block takes a 16 x 4 dot product per input word: what
VNNI's `vpdpbusd` computes in one instruction."""

from __future__ import annotations

from tvm import te

from ..amx import amx_conv_attrs, amx_conv_output
from ..ir_names import CONV_NCHWC_INT8_RULE, DOT_PRODUCT_ATTR, SCHEDULE_RULE
from .conv import crop, merge_channel_blocks, sliding_window, tileable_output

QUAD = 4  # input channels per 32-bit word of a VNNI dot product
OUT_BLOCK = 16  # s32 lanes of a zmm register
INT8_OUT_BLOCKS = (OUT_BLOCK, 8)  # output blocks the kernel takes: zmm or ymm accumulators


def conv2d_nchwc_int8(data: te.Tensor, weight: te.Tensor, strides, padding, dilation,
                      data_zero_point: int = 0, vnni: bool = True, amx: bool = False) -> te.Tensor:
    """`out[n, oc, y, x, ob] = sum_{ic, ky, kx, iq, q} data[n, ic, y*s+ky*d, x*s+kx*d, iq*4+q] *
    w[oc, ic, ky, kx, iq, ob, q]` in s32. Padding reads `data_zero_point`, the u8 code of a
    real zero, so that the weights' zero-point correction (a constant per output channel,
    folded into the bias) holds at the borders too. `vnni`: the dot product the schedule
    tensorizes with (`DOT_PRODUCT_ATTR`: "vnni" or "avx512"). `amx`: computed on AMX tiles
    (`tdpbusd`) instead, where the shape `amx.fits_amx_conv`; their weights' input block may
    be several of the data's (`amx.amx_input_blocks`), which the data's are merged into as it
    is padded."""
    out_chunks, in_chunks, kernel_h, kernel_w, in_quads, out_block, quad = weight.shape
    group = int(in_quads) * QUAD // int(data.shape[-1])
    if group > 1:
        data = merge_channel_blocks(data, group)
    rounding = amx_conv_output if amx else tileable_output
    padded, (out_h, out_w), taps, at = sliding_window(
        data, (kernel_h, kernel_w), strides, padding, dilation, 1, pad_value=data_zero_point,
        round_output=rounding, clamp_rounded=not amx)
    ic = te.reduce_axis((0, in_chunks), name="ic")
    iq = te.reduce_axis((0, in_quads), name="iq")
    q = te.reduce_axis((0, quad), name="q")

    def value(n, oc, y, x, ob):
        pixel = padded[(n, ic, *at((y, x)), iq * QUAD + q)].astype("int32")
        return te.sum(pixel * weight[(oc, ic, *taps, iq, ob, q)].astype("int32"), axis=[ic, *taps, iq, q])

    attrs = amx_conv_attrs(strides, dilation) if amx else \
        {SCHEDULE_RULE: CONV_NCHWC_INT8_RULE, DOT_PRODUCT_ATTR: "vnni" if vnni else "avx512"}
    computed = rounding((out_h, out_w))
    out = te.compute((data.shape[0], out_chunks, *computed, out_block), value, name="conv", attrs=attrs)
    return crop(out, (out_h, out_w))
