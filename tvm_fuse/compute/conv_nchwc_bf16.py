"""bf16 convolution in the blocked layout: fp32 activations NCHW{c}c (an odd c widened with a
zero channel) rounded to bf16 as the kernel pads them, or bf16 activations as they are, times
bf16 weights OIHW{c/2}i{16}o2i, accumulated in fp32 NCHW16c (or 8c). Two consecutive input
channels are one 32-bit word, so one output block takes a 16 x 2 dot product per word: what
AVX512-BF16's `vdpbf16ps` computes in one instruction."""

from __future__ import annotations

from tvm import te, tirx

from ..amx import amx_conv_attrs, amx_conv_output
from ..ir_names import CONV_NCHWC_BF16_RULE, DOT_PRODUCT_ATTR, SCHEDULE_RULE
from .bf16 import BITS, PAIR, from_bits, to_bits, to_bits_tensor
from .conv import (
    crop,
    gathered_strided_input,
    merge_channel_blocks,
    sliding_window,
    split_weight_index,
    tileable_output,
)

BF16_OUT_BLOCKS = (16, 8)  # fp32 accumulators of a zmm or ymm register


def conv2d_nchwc_bf16(data: te.Tensor, weight: te.Tensor, strides, padding, dilation, native: bool = True,
                      amx: bool = False, out_block: int | None = None) -> te.Tensor:
    """`out[n, oc, y, x, ob] = sum_{ic, ky, kx, ip, p} bf16(data[n, ic, y*s+ky*d, x*s+kx*d, ip*2+p]) *
    w[oc, ic, ky, kx, ip, ob, p]` in fp32, `w` the bf16 bits of `compute.bf16.pack_pairs`.
    `native`: tensorized with `vdpbf16ps`, else with its portable form (`DOT_PRODUCT_ATTR`).
    `amx`: computed on AMX tiles (`tdpbf16ps`) instead, where the shape `amx.fits_amx_conv`;
    their weights' input block may be several of the data's (`amx.amx_input_blocks`), which
    the data's are merged into as it is padded. `out_block`: the output's channel block, where
    it is several of the weight's (`split_output_blocks`: an AMX conv's C tiles of 16 in a
    block of 32)."""
    weight_chunks, in_chunks, kernel_h, kernel_w, in_pairs, weight_block, pair = weight.shape
    weight_block = int(weight_block)
    out_block = out_block or weight_block
    tiles = out_block // weight_block  # the weight's blocks per output block
    # The weights' input block spans `group` of the data's blocks (AMX), merged side by side; a
    # single block narrower than it (an image's 1 or 3 channels) is widened with zeros instead.
    group = int(in_pairs) * PAIR // int(data.shape[-1])
    if group > 1 and int(data.shape[1]) % group == 0:
        data = merge_channel_blocks(data, group)
    rounding = amx_conv_output if amx else tileable_output
    if not amx:  # an AMX tile loads strided rows as well as dense ones
        data, strides = gathered_strided_input(data, (kernel_h, kernel_w), strides, padding)
    padded, (out_h, out_w), taps, at = sliding_window(
        _paired_bits(data, int(in_pairs) * PAIR), (kernel_h, kernel_w), strides, padding, dilation, 1,
        round_output=rounding, clamp_rounded=not amx)
    ic = te.reduce_axis((0, in_chunks), name="ic")
    ip = te.reduce_axis((0, in_pairs), name="ip")
    p = te.reduce_axis((0, pair), name="p")

    def value(n, oc, y, x, ob):
        pixel = from_bits(padded[(n, ic, *at((y, x)), ip * PAIR + p)])
        chunk, column = split_weight_index(oc, ob, weight_block, out_block)
        return te.sum(pixel * from_bits(weight[(chunk, ic, *taps, ip, column, p)]), axis=[ic, *taps, ip, p])

    attrs = amx_conv_attrs(strides, dilation) if amx else \
        {SCHEDULE_RULE: CONV_NCHWC_BF16_RULE, DOT_PRODUCT_ATTR: "vdpbf16ps" if native else "portable"}
    computed = rounding((out_h, out_w))
    out = te.compute((data.shape[0], weight_chunks // tiles, *computed, out_block), value, name="conv", attrs=attrs)
    return crop(out, (out_h, out_w))


def _paired_bits(data: te.Tensor, block: int) -> te.Tensor:
    """`data` as bf16 bits, its channel block widened to `block` (whole pairs: an RGB image's 3
    channels to 4) with zeros, which the weights' zero pairs multiply."""
    if int(data.shape[-1]) == block:
        return to_bits_tensor(data)
    channels = int(data.shape[-1])
    zero = tirx.const(0, BITS)
    return te.compute((*data.shape[:-1], block),
                      lambda *i: tirx.if_then_else(i[-1] < channels, to_bits(data[(*i[:-1], i[-1])]), zero),
                      name="to_bf16")
