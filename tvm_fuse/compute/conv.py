"""Direct convolution over NC[spatial] data and OI[spatial] weights, 1-D or 2-D, any groups."""

from __future__ import annotations

from tvm import te, topi

from . import SCHEDULE_RULE

CONV_RULE = "tvm_fuse.conv_nchw"


def sliding_window(data: te.Tensor, kernel, strides, padding, dilation, trailing: int = 0, pad_value=0.0):
    """A window sliding over `data`'s spatial axes (those after N and C, but the last
    `trailing`, such as NCHWc's channel block): the input padded with `pad_value`, the output
    size, one reduction axis per kernel axis, and `at(y)`, the input position output `y` reads
    at the current kernel tap. `padding` lists the leading pads of every spatial axis, then the
    trailing ones (Relax's order: top, left, bottom, right for 2-D)."""
    rank = len(kernel)
    before, after = list(padding[:rank]), list(padding[rank:])
    spatial = data.shape[2:len(data.shape) - trailing]
    padded = data
    if any(before + after):
        padded = topi.nn.pad(data, [0, 0, *before, *[0] * trailing], [0, 0, *after, *[0] * trailing],
                             pad_value=pad_value, name="pad")
    out_size = [(spatial[a] + before[a] + after[a] - dilation[a] * (kernel[a] - 1) - 1) // strides[a] + 1
                for a in range(rank)]
    taps = [te.reduce_axis((0, kernel[a]), name=f"k{a}") for a in range(rank)]

    def at(y):
        return [y[a] * strides[a] + taps[a] * dilation[a] for a in range(rank)]

    return padded, out_size, taps, at


def is_depthwise(groups, weight_shape) -> bool:
    """Whether a conv of `groups` with a weight of `weight_shape` (OI[spatial], or blocked
    OIHW{i}i{o}o) is depthwise: one input channel per group."""
    inputs = int(weight_shape[1]) * (int(weight_shape[4]) if len(weight_shape) == 6 else 1)
    return int(groups) > 1 and inputs == 1


def convolution(data: te.Tensor, weight: te.Tensor, strides, padding, dilation, groups: int) -> te.Tensor:
    """`out[n, o, *y] = sum_{i, *k} pad(data)[n, g*I + i, *(y*stride + k*dilation)] * weight[o, i, *k]`.

    Depthwise is `groups == channels`.
    """
    out_channels, group_channels = weight.shape[:2]
    padded, out_size, taps, at = sliding_window(data, weight.shape[2:], strides, padding, dilation)
    out_per_group = out_channels // groups
    i = te.reduce_axis((0, group_channels), name="i")

    def value(n, o, *y):
        channel = (o // out_per_group) * group_channels + i
        return te.sum(padded[(n, channel, *at(y))] * weight[(o, i, *taps)], axis=[i, *taps])

    return te.compute((data.shape[0], out_channels, *out_size), value, name="conv", attrs={SCHEDULE_RULE: CONV_RULE})
