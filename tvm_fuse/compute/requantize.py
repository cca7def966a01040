"""The int8 <-> fp32 steps of an int8 kernel, as elementwise stages its schedule inlines:
the s32 accumulator to real values, a u8 input to real values, real values to u8.

A u8 tensor stands for `real = scale * (code - zero_point)`; weights are s8 with a scale per
output channel and no zero point."""

from __future__ import annotations

from tvm import te

U8_MAX = 255


def dequantize_accumulator(acc: te.Tensor, correction: te.Tensor, multiplier: te.Tensor) -> te.Tensor:
    """`(acc + correction) * multiplier`, both per output channel (shape (1, C, 1, 1, c)):
    `correction` is -zero_point x the channel's weight sum, `multiplier` is the data scale x
    the channel's weight scale."""

    def value(n, c, y, x, b):
        return (acc[n, c, y, x, b] + correction[0, c, 0, 0, b]).astype("float32") * multiplier[0, c, 0, 0, b]

    return te.compute(acc.shape, value, name="dequantize_acc")


def dequantize(codes: te.Tensor, scale: float, zero_point: int) -> te.Tensor:
    return te.compute(codes.shape, lambda *i: (codes(*i).astype("float32") - float(zero_point)) * scale,
                      name="dequantize")


def quantize(real: te.Tensor, scale: float, zero_point: int, block: int | None = None) -> te.Tensor:
    """Round to the nearest code (ties to even, as ONNX QuantizeLinear) and saturate. `te.round`
    lowers to LLVM's nearbyint (ties to even) and vectorizes; `te.nearbyint` left the whole
    epilogue scalar, half as fast, which LLVM then re-vectorized 8 lanes wide. `block`:
    the last axis padded to this many lanes with the code of zero (a 3-channel image made
    4-channel for the int8 conv's quads)."""
    lanes = real.shape[-1]

    def value(*i):
        code = te.round(real(*i) * (1.0 / scale)) + float(zero_point)
        return te.max(te.min(code, float(U8_MAX)), 0.0).astype("uint8")

    if block is None or block == lanes:
        return te.compute(real.shape, value, name="quantize")
    return te.compute((*real.shape[:-1], block),
                      lambda *i: te.if_then_else(i[-1] < lanes, value(*i[:-1], te.min(i[-1], lanes - 1)),
                                                 te.const(zero_point, "uint8")),
                      name="quantize")
