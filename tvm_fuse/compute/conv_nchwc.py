"""Convolution in the blocked layout NCHW{c}c: channels split into blocks of `c` (the vector
width), so a block of output channels is one vector register and the input block is read as
contiguous scalars to broadcast. Weights are OIHW{c}i{c}o (depthwise: OIHW1i{c}o), packed
once at build time. A grouped conv whose groups are whole blocks reads, for each output
block, the input blocks of its group."""

from __future__ import annotations

from tvm import te

from ..ir_names import CONV_NCHWC_RULE, DEPTHWISE_NCHWC_RULE, SCHEDULE_RULE
from .conv import crop, sliding_window, tileable_output


def conv2d_nchwc(data: te.Tensor, weight: te.Tensor, strides, padding, dilation, groups: int = 1) -> te.Tensor:
    """`out[n, oc, y, x, ob] = sum_{ic, ky, kx, ib} data[n, g*IC + ic, y*s+ky*d, x*s+kx*d, ib]
    * w[oc, ic, ky, kx, ib, ob]`, g the group of output block `oc` and IC the input blocks per
    group (all, for one group)."""
    out_chunks, in_chunks, kernel_h, kernel_w, in_block, out_block = weight.shape
    padded, (out_h, out_w), taps, at = sliding_window(data, (kernel_h, kernel_w), strides, padding, dilation, 1,
                                                      round_output=tileable_output, clamp_rounded=True)
    ic = te.reduce_axis((0, in_chunks), name="ic")
    ib = te.reduce_axis((0, in_block), name="ib")
    out_per_group = out_chunks // groups

    def value(n, oc, y, x, ob):
        chunk = ic if groups == 1 else oc // out_per_group * in_chunks + ic
        pixel = padded[(n, chunk, *at((y, x)), ib)]
        return te.sum(pixel * weight[(oc, ic, *taps, ib, ob)], axis=[ic, *taps, ib])

    out = te.compute((data.shape[0], out_chunks, *tileable_output((out_h, out_w)), out_block), value, name="conv",
                     attrs={SCHEDULE_RULE: CONV_NCHWC_RULE})
    return crop(out, (out_h, out_w))


def depthwise_conv2d_nchwc(data: te.Tensor, weight: te.Tensor, strides, padding, dilation) -> te.Tensor:
    """`out[n, c, y, x, b] = sum_{ky, kx} data[n, c, y*s+ky*d, x*s+kx*d, b] * w[c, 0, ky, kx, 0, b]`."""
    batch, chunks, _, _, block = data.shape
    padded, (out_h, out_w), taps, at = sliding_window(data, weight.shape[2:4], strides, padding, dilation, 1)

    def value(n, c, y, x, b):
        return te.sum(padded[(n, c, *at((y, x)), b)] * weight[(c, 0, *taps, 0, b)], axis=taps)

    return te.compute((batch, chunks, out_h, out_w, block), value, name="conv",
                      attrs={SCHEDULE_RULE: DEPTHWISE_NCHWC_RULE})
