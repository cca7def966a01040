"""The int8 <-> fp32 steps of an int8 kernel, as elementwise stages its schedule inlines:
the s32 accumulator to real values, a u8 input to real values, real values to u8.

A u8 tensor stands for `real = scale * (code - zero_point)`; weights are s8 with a scale per
output channel and no zero point."""

from __future__ import annotations

import numbers

import numpy as np
from tvm import te, tirx

U8_MAX = 255
# 1.5 x 2**23: a float32 in [2**23, 2**24) is an integer, so adding this to a value of magnitude
# below 2**22 rounds it to an integer (ties to even), which the float's low bits then hold.
ROUNDING_SHIFT = 12582912.0


def holds_integers(values: np.ndarray) -> bool:
    """Whether every value is an integer: codes held as floats (ConvInteger's). A float model's
    weights fail on their first 256 values, without a pass over all of them."""
    head = values.reshape(-1)[:256]
    return bool(np.array_equal(head, np.round(head)) and np.array_equal(values, np.round(values)))


def dequantize_accumulator(acc: te.Tensor, multiplier: te.Tensor, correction: te.Tensor | None = None) -> te.Tensor:
    """`(acc + correction) * multiplier`, both per output channel (shape (1, C, 1, 1, c)):
    `correction` is -zero_point x the channel's weight sum (None for a zero point of 0),
    `multiplier` is the data scale x the channel's weight scale."""

    def value(n, c, y, x, b):
        total = acc[n, c, y, x, b] if correction is None else acc[n, c, y, x, b] + correction[0, c, 0, 0, b]
        return total.astype("float32") * multiplier[0, c, 0, 0, b]

    return te.compute(acc.shape, value, name="dequantize_acc")


def dequantize_columns(product: te.Tensor, scale: te.Tensor) -> te.Tensor:
    """A product with s8 weights times the weights' scale per output column (last axis)."""
    return te.compute(product.shape, lambda *i: product(*i) * scale[i[-1]], name="dequantize_columns")


def dequantize(codes: te.Tensor, scale, zero_point) -> te.Tensor:
    """`scale` and `zero_point`: numbers, or scalar expressions (a kernel's parameters)."""
    zero = zero_point if not isinstance(zero_point, numbers.Real) else float(zero_point)
    return te.compute(codes.shape, lambda *i: (codes(*i).astype("float32") - zero) * scale, name="dequantize")


def code_shift(zero_point: int) -> float:
    """What a code's FMA adds (`_code`): the rounding shift and the zero point."""
    return ROUNDING_SHIFT + zero_point


def _code(real, inverse_scale, shift):
    """The u8 code of the real value `real` (an expression), in four vector instructions: one
    FMA scales it (by `inverse_scale`, 1 / the scale) and adds the zero point and the rounding
    shift (`shift`, `code_shift`), a min and a max saturate it, and the code is the low byte of
    its bits (te.round, a clamp and a conversion took seven). Rounds to the nearest code, ties
    to even, as ONNX QuantizeLinear."""
    shifted = real * inverse_scale + shift
    saturated = te.min(te.max(shifted, ROUNDING_SHIFT), ROUNDING_SHIFT + U8_MAX)
    return tirx.reinterpret("int32", saturated).astype("uint8")


def requantized(real: te.Tensor, inverse_scale, shift) -> te.Tensor:
    """`real` as u8 codes, the scale given as `_code` takes it: numbers, or scalar expressions
    (a kernel's parameters, so that kernels of one shape share code whatever their scales)."""
    return te.compute(real.shape, lambda *i: _code(real(*i), inverse_scale, shift), name="quantize")


def on_grid(real: te.Tensor, scale: float, zero_point: int) -> te.Tensor:
    """`real` rounded to its nearest u8 code of (`scale`, `zero_point`), as a real value: a
    QuantizeLinear and its DequantizeLinear in one pass."""
    inverse, shift = 1.0 / scale, code_shift(zero_point)
    return te.compute(real.shape, lambda *i: (_code(real(*i), inverse, shift).astype("float32") - float(zero_point))
                      * scale, name="on_grid")


def quantize(real: te.Tensor, scale: float, zero_point: int, block: int | None = None) -> te.Tensor:
    """`real` as u8 codes. `block`: the last axis padded to this many lanes with the code of
    zero (a 3-channel image made 4-channel for the int8 conv's quads)."""
    lanes = real.shape[-1]
    if block is None or block == lanes:
        return requantized(real, 1.0 / scale, code_shift(zero_point))
    return te.compute((*real.shape[:-1], block),
                      lambda *i: te.if_then_else(i[-1] < lanes, _code(real(*i[:-1], te.min(i[-1], lanes - 1)),
                                                                      1.0 / scale, code_shift(zero_point)),
                                                 te.const(zero_point, "uint8")),
                      name="quantize")


def quantize_to_blocked(real: te.Tensor, scale: float, zero_point: int, channels: int, block: int) -> te.Tensor:
    """NCHW real values straight to u8 codes in NCHW{block}c, each run of `channels` channels
    one block, padded to `block` lanes with the code of zero: a network input's layout change
    and quantize in one pass over it."""
    batch, total, height, width = real.shape

    def value(n, chunk, y, x, lane):
        code = _code(real[n, chunk * channels + te.min(lane, channels - 1), y, x], 1.0 / scale, code_shift(zero_point))
        return te.if_then_else(lane < channels, code, te.const(zero_point, "uint8"))

    return te.compute((batch, total // channels, height, width, block), value, name="quantize")
