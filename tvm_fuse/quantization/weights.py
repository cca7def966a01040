"""Weights to s8 at build time, with a symmetric scale per output channel: conv weights packed
as the int8 kernel reads them (`compute.conv_nchwc_int8`), dense weights [K, N] kept as they
are (`compute.matmul` converts them to fp32 as it loads them)."""

from __future__ import annotations

import numpy as np

S8_MAX = 127
# vpmaddubsw sums two u8 x s8 products in int16, saturating: 2 x 255 x 63 < 32767, so on
# AVX-512 without VNNI weights keep 7 bits.
S7_MAX = 63


def quantize_blocked_weight(weight: np.ndarray, limit: int, per_channel: bool = True
                            ) -> tuple[np.ndarray, np.ndarray]:
    """OIHW{i}i{o}o fp32 -> (the s8 codes in the same layout, the scales as (O/o, o)), a scale
    per output channel or one for all."""
    return _symmetric(weight, (1, 2, 3, 4), limit, per_channel)


def pack_vnni(codes: np.ndarray) -> np.ndarray:
    """OIHW{i}i{o}o -> OIHW{i/4}i{o}o4i: four consecutive input channels next to each other,
    the 32-bit word one `vpdpbusd` lane multiplies."""
    o_chunks, i_chunks, kh, kw, i_block, o_block = codes.shape
    quads = codes.reshape(o_chunks, i_chunks, kh, kw, i_block // 4, 4, o_block)
    return np.ascontiguousarray(quads.transpose(0, 1, 2, 3, 4, 6, 5))


def quantize_dense_weight(weight: np.ndarray, per_channel: bool = True, limit: int = S8_MAX
                          ) -> tuple[np.ndarray, np.ndarray]:
    """[K, N] fp32 -> (the s8 codes [K, N] in [-limit, limit], the scales [N]), a scale per
    output column or one for all."""
    return _symmetric(weight, (0,), limit, per_channel)


def _symmetric(weight: np.ndarray, axes: tuple, limit: int, per_channel: bool) -> tuple[np.ndarray, np.ndarray]:
    """(codes in [-limit, limit], scales): a scale per output channel (the entries left after
    reducing `axes`) or one for all. A channel of zeros gets scale 1 (its codes are zero
    either way)."""
    peak = np.abs(weight).max(axis=axes, keepdims=True)
    if not per_channel:
        peak = np.full_like(peak, peak.max())
    scale = np.where(peak > 0, peak / limit, 1.0).astype(np.float32)
    codes = np.clip(np.rint(weight / scale), -limit, limit).astype(np.int8)
    return codes, scale.squeeze(axis=axes)
