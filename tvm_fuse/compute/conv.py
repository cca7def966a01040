"""Direct convolution over NC[spatial] data and OI[spatial] weights, 1-D or 2-D, any groups."""

from __future__ import annotations

import numpy as np
import tvm
from tvm import te, topi

from ..ir_names import CONV_NCHW_RULE, SCHEDULE_RULE


def sliding_window(data: te.Tensor, kernel, strides, padding, dilation, trailing: int = 0, pad_value=0.0,
                   round_output=None, clamp_rounded: bool = False):
    """A window sliding over `data`'s spatial axes (those after N and C, but the last
    `trailing`, such as NCHWc's channel block): the input padded with `pad_value`, the output
    size, one reduction axis per kernel axis, and `at(y)`, the input position output `y` reads
    at the current kernel tap. `padding` lists the leading pads of every spatial axis, then the
    trailing ones (Relax's order: top, left, bottom, right for 2-D). `round_output`: a function
    of the output size to a larger one, which the caller computes (`crop` cuts it to the conv's):
    the input is padded after each axis for it, or with `clamp_rounded` the outputs past the
    conv's read its last input position instead (a conv that reads each input as a scalar,
    which then needs no padded copy where the conv has no padding). The output size returned is
    the conv's."""
    rank = len(kernel)
    before, after = list(padding[:rank]), list(padding[rank:])
    spatial = data.shape[2:len(data.shape) - trailing]
    out_size = [(spatial[a] + before[a] + after[a] - dilation[a] * (kernel[a] - 1) - 1) // strides[a] + 1
                for a in range(rank)]
    last = [spatial[a] + before[a] + after[a] - 1 for a in range(rank)]
    clamped = []
    if round_output is not None:
        for a, (size, rounded) in enumerate(zip(out_size, round_output(out_size))):
            if rounded is not size and clamp_rounded:
                clamped.append(a)
            elif rounded is not size:
                after[a] += (rounded - size) * strides[a]
    padded = data
    if any(not isinstance(p, int | tvm.tirx.IntImm) or int(p) for p in before + after):
        padded = topi.nn.pad(data, [0, 0, *before, *[0] * trailing], [0, 0, *after, *[0] * trailing],
                             pad_value=pad_value, name="pad")
    taps = [te.reduce_axis((0, kernel[a]), name=f"k{a}") for a in range(rank)]

    def at(y):
        position = [y[a] * strides[a] + taps[a] * dilation[a] for a in range(rank)]
        return [te.min(p, last[a]) if a in clamped else p for a, p in enumerate(position)]

    return padded, out_size, taps, at


STRIDED_INPUT = "strided"  # the stage of `gathered_strided_input`


def gathered_strided_input(data: te.Tensor, kernel, strides, padding):
    """(data, strides) of a blocked conv, where it is a 1x1 conv with a stride and no padding:
    the pixels it reads, gathered in a stage of their own (`STRIDED_INPUT`), and stride 1;
    else as given. A bf16 pixel's channel block is half a cache line, so the strided reads of
    a tile would use half of every line, and its rows take twice the cache; the schedule
    keeps the stage as a pass or inlines it (back to strided reads)."""
    if any(int(k) != 1 for k in kernel) or all(int(s) == 1 for s in strides) or any(int(p) for p in padding):
        return data, strides
    rank = len(kernel)
    spatial = data.shape[2:2 + rank]
    size = [(spatial[a] - 1) // strides[a] + 1 for a in range(rank)]

    def value(n, chunk, *rest):
        at = [rest[a] * strides[a] for a in range(rank)]
        return data[(n, chunk, *at, *rest[rank:])]

    return te.compute((*data.shape[:2], *size, *data.shape[2 + rank:]), value, name=STRIDED_INPUT), [1] * rank


def crop(out: te.Tensor, size) -> te.Tensor:
    """`out` (N, C, spatial..., trailing) cut to its first `size` rows (and columns): the output
    of a `sliding_window` whose size was rounded up. Sizes may be symbolic (rounded never)."""
    analyzer = tvm.sym.Analyzer()
    if all(analyzer.can_prove_equal(extent, wanted) for extent, wanted in zip(out.shape[2:2 + len(size)], size)):
        return out
    return te.compute((*out.shape[:2], *size, *out.shape[2 + len(size):]), lambda *i: out(*i), name="crop")


def merge_channel_blocks(data: te.Tensor, group: int) -> te.Tensor:
    """NC[spatial]{c}c `data` as NC[spatial]{group * c}c: each `group` neighbouring channel
    blocks side by side in one."""
    block = int(data.shape[-1])

    def value(n, chunk, *rest):
        *spatial, lane = rest
        return data[(n, chunk * group + lane // block, *spatial, lane % block)]

    return te.compute((data.shape[0], data.shape[1] // group, *data.shape[2:-1], block * group), value,
                      name="merge_blocks")


def merge_input_blocks(weight: np.ndarray, group: int) -> np.ndarray:
    """A blocked conv weight OIHW{i}i{o}o -> OIHW{group * i}i{o}o, its input blocks merged as
    `merge_channel_blocks` merges the data's."""
    o_chunks, i_chunks, kh, kw, i_block, o_block = weight.shape
    split = weight.reshape(o_chunks, i_chunks // group, group, kh, kw, i_block, o_block)
    return np.ascontiguousarray(split.transpose(0, 1, 3, 4, 2, 5, 6)).reshape(
        o_chunks, i_chunks // group, kh, kw, group * i_block, o_block)


def split_output_blocks(weight: np.ndarray, block: int) -> np.ndarray:
    """A blocked conv weight OIHW{i}i{o}o (or packed, its output block's axis 5 followed by
    the pack's) -> the same in output blocks of `block`: output block `o` of the result is
    block `o // (o_block / block)`'s part `o % (o_block / block)`."""
    o_chunks, *middle, o_block = weight.shape[:6]
    parts = weight.reshape(o_chunks, *middle, o_block // block, block, *weight.shape[6:])
    return np.ascontiguousarray(np.moveaxis(parts, 5, 1)).reshape(o_chunks * o_block // block, *middle, block,
                                                                  *weight.shape[6:])


def split_weight_index(block, lane, weight_block: int, out_block: int) -> tuple:
    """The (output block, column) of a `split_output_blocks` weight that output channel `lane`
    of output block `block` reads: the index itself where the blocks are the same, so that the
    AMX conv's description (`schedules.amx`) matches the compute as written."""
    if weight_block == out_block:
        return block, lane
    return block * (out_block // weight_block) + lane // weight_block, lane % weight_block


def fold_row_taps(data: te.Tensor, kernel_w: int, strides, padding, dilation, pad_value=0.0):
    """An NCHW{c}c conv over one channel block (an image's 3 channels) as the conv of a
    one-tap-wide kernel over its padded input with each output pixel's row of `kernel_w` taps
    side by side in its channel block: `folded[n, 0, y, x, t * c + ch] = padded[n, 0, y,
    x * stride_w + t * dilation_w, ch]`, whose (kernel_h x 1) conv with the weights of
    `fold_weight_taps` sums the same products. Returns the conv's (data, strides, padding,
    dilation). On AMX a tap row is then one tile row: 7 x 3 bf16 in one step instead of 7.
    Padding reads `pad_value`."""
    block, (top, left, bottom, right) = int(data.shape[-1]), padding
    padded = data
    if any(padding):
        padded = topi.nn.pad(data, [0, 0, top, left, 0], [0, 0, bottom, right, 0], pad_value=pad_value, name="pad")
    out_w = (int(padded.shape[3]) - dilation[1] * (kernel_w - 1) - 1) // strides[1] + 1

    def value(n, chunk, y, x, lane):
        return padded[n, chunk, y, x * strides[1] + lane // block * dilation[1], lane % block]

    folded = te.compute((*padded.shape[:3], out_w, kernel_w * block), value, name="fold_taps")
    return folded, (strides[0], 1), (0, 0, 0, 0), (dilation[0], 1)


def fold_weight_taps(weight: np.ndarray) -> np.ndarray:
    """A blocked conv weight OIHW{i}i{o}o of one input block -> OIH1{W * i}i{o}o, its row of
    taps in the input block as `fold_row_taps` folds the data."""
    o_chunks, i_chunks, kh, kw, i_block, o_block = weight.shape
    return weight.reshape(o_chunks, i_chunks, kh, 1, kw * i_block, o_block)


def is_depthwise(groups, weight_shape) -> bool:
    """Whether a conv of `groups` with a weight of `weight_shape` (OI[spatial], or blocked
    OIHW{i}i{o}o) is depthwise: one input channel per group."""
    inputs = int(weight_shape[1]) * (int(weight_shape[4]) if len(weight_shape) == 6 else 1)
    return int(groups) > 1 and inputs == 1


ROW_GRANULES = ((512, 64), (128, 32), (9, 16))  # (from this output row width, round it to a multiple of)
SYMBOLIC_ROW_GRANULE = 32  # a row of symbolic width: two vectors of the widest ISA


def whole_vector_width(width, padded: bool = True):
    """A static output row of `width` rounded up to whole vectors of the widest ISA (several
    for a long row: the schedule's register tile), or None to leave it (short or already
    whole); a symbolic one always, to `SYMBOLIC_ROW_GRANULE` (else the schedule cannot prove
    its vectors whole, and runs the row in scalar code).
    A row that a vector does not divide would leave the schedule a scalar tail. Not `padded`:
    a conv whose input has no padded copy but for the rounding, whose row whole vectors
    already divide is left too (the copy cost more than the wider tile gains)."""
    if not isinstance(width, int | tvm.tirx.IntImm):
        return (width + SYMBOLIC_ROW_GRANULE - 1) // SYMBOLIC_ROW_GRANULE * SYMBOLIC_ROW_GRANULE
    width = int(width)
    granule = next((g for start, g in ROW_GRANULES if width >= start), None)
    if granule is None or width % granule == 0 or (not padded and width % ROW_GRANULES[-1][1] == 0):
        return None
    return -(-width // granule) * granule


WIDE_ROW = 28  # an NCHW{c}c conv's output row this wide or wider takes register tiles of 4 channel blocks
TILE_WIDTHS = range(4, 8)  # pixels of a row in such a tile: 16 to 28 accumulators


def tileable_output(size) -> tuple:
    """The (rows, width) an NCHW{c}c conv computes, of which its `size` is cut (`crop`): a wide row
    that no tile width divides (38, 111, a prime) rounded up to the next that one does, which
    would otherwise take tiles of 1-3 pixels, too few accumulators to hide the FMAs' latency."""
    rows, width = size
    if not isinstance(width, int | tvm.tirx.IntImm) or int(width) < WIDE_ROW:
        return rows, width
    rounded = next(w for w in range(int(width), int(width) + max(TILE_WIDTHS)) if any(w % t == 0 for t in TILE_WIDTHS))
    return rows, width if rounded == int(width) else rounded


def convolution(data: te.Tensor, weight: te.Tensor, strides, padding, dilation, groups: int) -> te.Tensor:
    """`out[n, o, *y] = sum_{i, *k} pad(data)[n, g*I + i, *(y*stride + k*dilation)] * weight[o, i, *k]`,
    its rows computed to whole vectors (`whole_vector_width`) and cropped.

    Depthwise is `groups == channels`.
    """
    out_channels, group_channels = weight.shape[:2]
    has_padding = any(int(p) for p in padding)

    def round_output(size):
        # A symbolic row of strided outputs stays scalar: its vectors would gather the input.
        strided = not isinstance(size[-1], int | tvm.tirx.IntImm) and int(strides[-1]) > 1
        rounded = None if strided else whole_vector_width(size[-1], has_padding)
        return [*size[:-1], size[-1] if rounded is None else rounded]

    padded, out_size, taps, at = sliding_window(data, weight.shape[2:], strides, padding, dilation,
                                                round_output=round_output)
    out_per_group = out_channels // groups
    i = te.reduce_axis((0, group_channels), name="i")

    def value(n, o, *y):
        channel = (o // out_per_group) * group_channels + i
        return te.sum(padded[(n, channel, *at(y))] * weight[(o, i, *taps)], axis=[i, *taps])

    rows = round_output(out_size)
    out = te.compute((data.shape[0], out_channels, *rows), value, name="conv", attrs={SCHEDULE_RULE: CONV_NCHW_RULE})
    return crop(out, out_size)
