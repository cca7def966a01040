"""bfloat16 values as their 16 bits (uint16): the upper half of an fp32.

Our bf16 kernels never use TVM's `bfloat16` dtype: TVM 0.27 legalizes it to fp32 arithmetic
(BF16ComputeLegalize) before a tensor intrinsic can hand it to `vdpbf16ps`, and its LLVM code
generator crashes on it unlegalized. As bits, a bf16 tensor is plain integer data until the
dot-product instruction reads it (`tvm_fuse.schedules.intrinsics`).
"""

from __future__ import annotations

import numpy as np
from tvm import te, tirx

PAIR = 2  # bf16 values per 32-bit word: what one fp32 lane of `vdpbf16ps` sums
BITS = "uint16"  # the dtype of a bf16 tensor


def to_bits(value: tirx.PrimExpr) -> tirx.PrimExpr:
    """fp32 -> bf16 bits, rounded to nearest even (as `vcvtneps2bf16`; NaN inputs are not expected)."""
    bits = tirx.reinterpret("uint32", value)
    rounding = tirx.const(0x7FFF, "uint32") + ((bits >> tirx.const(16, "uint32")) & tirx.const(1, "uint32"))
    return ((bits + rounding) >> tirx.const(16, "uint32")).astype(BITS)


def from_bits(bits: tirx.PrimExpr) -> tirx.PrimExpr:
    """bf16 bits -> the fp32 of the same value (exact)."""
    return tirx.reinterpret("float32", bits.astype("uint32") << tirx.const(16, "uint32"))


def to_bits_tensor(data: te.Tensor) -> te.Tensor:
    """`data` as bf16 bits: itself if it already is."""
    if data.dtype == BITS:
        return data
    return te.compute(data.shape, lambda *i: to_bits(data[i]), name="to_bf16")


def from_bits_tensor(bits: te.Tensor) -> te.Tensor:
    return te.compute(bits.shape, lambda *i: from_bits(bits[i]), name="from_bf16")


def bits_of(array: np.ndarray) -> np.ndarray:
    """numpy fp32 -> bf16 bits (uint16), rounded to nearest even, as `to_bits`."""
    bits = np.ascontiguousarray(array, dtype=np.float32).view(np.uint32)
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(BITS)


def value_of(bits: np.ndarray) -> np.ndarray:
    """numpy bf16 bits -> fp32."""
    return (bits.astype(np.uint32) << 16).view(np.float32)


def pack_pairs(weight: np.ndarray) -> np.ndarray:
    """A blocked conv weight OIHW{i}i{o}o (fp32) -> bf16 bits OIHW{i/2}i{o}o2i: two consecutive
    input channels side by side, the 32-bit word one `vdpbf16ps` lane multiplies (an odd i
    gets a zero channel)."""
    if weight.shape[4] % PAIR:  # an odd input block (an RGB stem's 3 channels): a zero channel
        weight = np.pad(weight, [(0, 0)] * 4 + [(0, 1), (0, 0)])
    o_chunks, i_chunks, kh, kw, i_block, o_block = weight.shape
    pairs = bits_of(weight).reshape(o_chunks, i_chunks, kh, kw, i_block // PAIR, PAIR, o_block)
    return np.ascontiguousarray(pairs.transpose(0, 1, 2, 3, 4, 6, 5))


def pack_dense_pairs(packed: np.ndarray) -> np.ndarray:
    """A dense weight packed [N/b, K, b] (fp32, `compute.matmul.pack_dense_weight`) -> bf16 bits
    [N/b, K/2, b, 2]: two consecutive rows of K side by side in each column's 32-bit word."""
    chunks, k, block = packed.shape
    return np.ascontiguousarray(bits_of(packed).reshape(chunks, k // PAIR, PAIR, block).transpose(0, 1, 3, 2))
