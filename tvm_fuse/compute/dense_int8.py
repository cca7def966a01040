"""int8 dense layers with activations quantized per row at run time (ONNX Runtime's dynamic
quantization, with a scale per token instead of one per tensor):

1. `quantize_rows`: each row of `x[..., K]` to u8 codes on its own range, `real = low +
   scale * code`, the row's (scale, low) kept beside the codes;
2. `dense_int8`: codes times s8 weights packed [N/b, K/4, b, 4] (`pack_dense_quads`), summed in
   s32, each step a b x 4 dot product: VNNI's `vpdpbusd`;
3. `dequantize_rows`: the accumulator back to real values in the kernel's epilogue,
   `(scale * acc + low * column_sum) * column_scale`, before the layer's own post-ops.
"""

from __future__ import annotations

import numpy as np
from tvm import te, tirx

from . import DENSE_AMX_RULE, DOT_PRODUCT_ATTR, SCHEDULE_RULE
from .matmul import dense_product
from .requantize import ROUNDING_SHIFT, U8_MAX
from .rowwise import row_reduction

DENSE_INT8_RULE = "tvm_fuse.dense_int8"
QUAD = 4  # u8 x s8 products per s32 lane of a `vpdpbusd`


def pack_dense_quads(codes: np.ndarray, block: int) -> np.ndarray:
    """s8 W[K, N] as [N/block, K/4, block, 4]: four consecutive rows of a column side by side,
    the word a `vpdpbusd` lane multiplies. K is padded with zero rows to a multiple of 4."""
    k, n = codes.shape
    codes = np.pad(codes, [(0, -k % QUAD), (0, 0)])
    quads = codes.reshape(-1, QUAD, n // block, block)
    return np.ascontiguousarray(quads.transpose(2, 0, 3, 1))


def quantize_rows(x: te.Tensor, lanes: int) -> tuple[te.Tensor, te.Tensor]:
    """(u8 codes [..., K rounded up to 4], per row (scale, low) [..., 2]) of fp32 `x`, whose
    last axis `lanes` divides. A row's range [low, high] maps onto codes 0..255 (a constant
    row: scale 1, codes 0). Codes count from `low`, not from a zero point, so that a row far
    from zero keeps its resolution. The padded codes are 0: they meet zero weights."""
    *rows, width = x.shape
    width = int(width)
    high = row_reduction(x, x, te.max, lanes, "max", anchor=True)
    low = row_reduction(x, x, te.min, lanes, "min")

    def scale(*row):
        spread = (high(*row) - low(*row)) / float(U8_MAX)
        return te.if_then_else(spread > 0, spread, tirx.const(1.0, "float32"))

    inverse = te.compute(rows, lambda *row: tirx.const(1.0, "float32") / scale(*row), name="row_inverse")
    # The codes read the reductions, not `params`: a kernel's outputs cannot feed each other.
    params = te.compute((*rows, 2), lambda *i: te.if_then_else(i[-1] == 0, scale(*i[:-1]), low(*i[:-1])),
                        name="row_params")

    def code(*index):  # rounded and saturated as `requantize._code`
        *row, k = index
        shifted = (x(*row, te.min(k, width - 1)) - low(*row)) * inverse(*row) + ROUNDING_SHIFT
        saturated = te.min(te.max(shifted, ROUNDING_SHIFT), ROUNDING_SHIFT + U8_MAX)
        value = tirx.reinterpret("int32", saturated).astype("uint8")
        return value if width % QUAD == 0 else te.if_then_else(k < width, value, tirx.const(0, "uint8"))

    codes = te.compute((*rows, width + -width % QUAD), code, name="row_codes")
    return codes, params


def dense_int8(codes: te.Tensor, packed: te.Tensor, vnni: bool = True, amx: bool = False) -> te.Tensor:
    """`codes[..., K] @ W` in s32, W packed by `pack_dense_quads`. `vnni`: the dot product the
    schedule tensorizes with (`vpdpbusd`, else `vpmaddubsw` + `vpmaddwd` on 7-bit weights).
    `amx`: computed on AMX tiles (`tdpbusd`) instead, where the shape `compute.fits_amx`."""
    chunks, quads, block, quad = packed.shape
    kq = te.reduce_axis((0, quads), name="kq")
    q = te.reduce_axis((0, quad), name="q")

    def value(rows, n):
        return te.sum(codes[(*rows, kq * QUAD + q)].astype("int32")
                      * packed[n // block, kq, n % block, q].astype("int32"), axis=[kq, q])

    attrs = {SCHEDULE_RULE: DENSE_AMX_RULE} if amx else \
        {SCHEDULE_RULE: DENSE_INT8_RULE, DOT_PRODUCT_ATTR: "vnni" if vnni else "avx512"}
    return dense_product(codes, chunks * block, value, attrs, pad=not amx)


def dequantize_rows(acc: te.Tensor, params: te.Tensor, column_sums: te.Tensor, column_scales: te.Tensor) -> te.Tensor:
    """Real values of the s32 `acc`: each row's (scale, low) from `params` ([..., 2]; [2]: one
    for all rows, a calibrated scale), each column's weight sum (in codes, as float) and scale."""

    def value(*index):
        *row, n = index
        scale, low = (params(*row, j) if len(params.shape) > 1 else params(j) for j in (0, 1))
        in_codes = acc(*index).astype("float32") * scale + low * column_sums[n]
        return in_codes * column_scales[n]

    return te.compute(acc.shape, value, name="dequantize_rows")
