"""Direct convolution over NC[spatial] data and OI[spatial] weights, 1-D or 2-D, any groups."""

from __future__ import annotations

from tvm import te, topi

from . import SCHEDULE_RULE

CONV_RULE = "tvm_fuse.conv_nchw"


def convolution(data: te.Tensor, weight: te.Tensor, strides, padding, dilation, groups: int) -> te.Tensor:
    """`out[n, o, *y] = sum_{i, *k} pad(data)[n, g*I + i, *(y*stride + k*dilation)] * weight[o, i, *k]`.

    `padding` lists the leading pads of every spatial axis, then the trailing ones (Relax's
    order: top, left, bottom, right for 2-D). Depthwise is `groups == channels`.
    """
    rank = len(data.shape) - 2
    batch, in_channels = data.shape[:2]
    out_channels, group_channels = weight.shape[:2]
    kernel = weight.shape[2:]
    before, after = list(padding[:rank]), list(padding[rank:])
    padded = topi.nn.pad(data, [0, 0, *before], [0, 0, *after], name="pad") if any(before + after) else data
    out_size = [
        (data.shape[2 + a] + before[a] + after[a] - dilation[a] * (kernel[a] - 1) - 1) // strides[a] + 1
        for a in range(rank)
    ]
    out_per_group = out_channels // groups
    i = te.reduce_axis((0, group_channels), name="i")
    k = [te.reduce_axis((0, kernel[a]), name=f"k{a}") for a in range(rank)]

    def value(n, o, *y):
        channel = (o // out_per_group) * group_channels + i
        where = [y[a] * strides[a] + k[a] * dilation[a] for a in range(rank)]
        return te.sum(padded[(n, channel, *where)] * weight[(o, i, *k)], axis=[i, *k])

    del in_channels
    return te.compute((batch, out_channels, *out_size), value, name="conv", attrs={SCHEDULE_RULE: CONV_RULE})
