"""Convolution in the blocked layout NCHW{c}c: channels split into blocks of `c` (the vector
width), so a block of output channels is one vector register and the input block is read as
contiguous scalars to broadcast. Weights are OIHW{c}i{c}o (depthwise: OIHW1i{c}o), packed
once at build time."""

from __future__ import annotations

from tvm import te, topi

from . import SCHEDULE_RULE

CONV_NCHWC_RULE = "tvm_fuse.conv_nchwc"
DEPTHWISE_NCHWC_RULE = "tvm_fuse.depthwise_nchwc"


def _padded(data: te.Tensor, padding) -> te.Tensor:
    top, left, bottom, right = padding
    if not any(padding):
        return data
    return topi.nn.pad(data, [0, 0, top, left, 0], [0, 0, bottom, right, 0], name="pad")


def _out_size(size, before, after, kernel, stride, dilation):
    return (size + before + after - dilation * (kernel - 1) - 1) // stride + 1


def conv2d_nchwc(data: te.Tensor, weight: te.Tensor, strides, padding, dilation) -> te.Tensor:
    """`out[n, oc, y, x, ob] = sum_{ic, ky, kx, ib} data[n, ic, y*s+ky*d, x*s+kx*d, ib] * w[oc, ic, ky, kx, ib, ob]`."""
    batch, _, height, width, _ = data.shape
    out_chunks, in_chunks, kernel_h, kernel_w, in_block, out_block = weight.shape
    padded = _padded(data, padding)
    out_h = _out_size(height, padding[0], padding[2], kernel_h, strides[0], dilation[0])
    out_w = _out_size(width, padding[1], padding[3], kernel_w, strides[1], dilation[1])
    ic = te.reduce_axis((0, in_chunks), name="ic")
    ky = te.reduce_axis((0, kernel_h), name="ky")
    kx = te.reduce_axis((0, kernel_w), name="kx")
    ib = te.reduce_axis((0, in_block), name="ib")

    def value(n, oc, y, x, ob):
        pixel = padded[n, ic, y * strides[0] + ky * dilation[0], x * strides[1] + kx * dilation[1], ib]
        return te.sum(pixel * weight[oc, ic, ky, kx, ib, ob], axis=[ic, ky, kx, ib])

    return te.compute((batch, out_chunks, out_h, out_w, out_block), value, name="conv",
                      attrs={SCHEDULE_RULE: CONV_NCHWC_RULE})


def depthwise_conv2d_nchwc(data: te.Tensor, weight: te.Tensor, strides, padding, dilation) -> te.Tensor:
    """`out[n, c, y, x, b] = sum_{ky, kx} data[n, c, y*s+ky*d, x*s+kx*d, b] * w[c, 0, ky, kx, 0, b]`."""
    batch, chunks, height, width, block = data.shape
    _, _, kernel_h, kernel_w, _, _ = weight.shape
    padded = _padded(data, padding)
    out_h = _out_size(height, padding[0], padding[2], kernel_h, strides[0], dilation[0])
    out_w = _out_size(width, padding[1], padding[3], kernel_w, strides[1], dilation[1])
    ky = te.reduce_axis((0, kernel_h), name="ky")
    kx = te.reduce_axis((0, kernel_w), name="kx")

    def value(n, c, y, x, b):
        pixel = padded[n, c, y * strides[0] + ky * dilation[0], x * strides[1] + kx * dilation[1], b]
        return te.sum(pixel * weight[c, 0, ky, kx, 0, b], axis=[ky, kx])

    return te.compute((batch, chunks, out_h, out_w, block), value, name="conv",
                      attrs={SCHEDULE_RULE: DEPTHWISE_NCHWC_RULE})
