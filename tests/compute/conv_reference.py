"""The convolution the conv kernels' tests compare with, in numpy."""

from __future__ import annotations

import numpy as np


def conv2d(data: np.ndarray, weight: np.ndarray, stride: int, pad: int, pad_value=0) -> np.ndarray:
    """NCHW data x OIHW weights, padded with `pad_value`: exact in int64 for integer operands,
    else in float64."""
    wide = np.int64 if np.issubdtype(data.dtype, np.integer) else np.float64
    padded = np.pad(data.astype(wide), ((0, 0), (0, 0), (pad, pad), (pad, pad)), constant_values=pad_value)
    kernel = weight.shape[2]
    rows, cols = ((extent - kernel) // stride + 1 for extent in padded.shape[2:])
    result = np.zeros((data.shape[0], weight.shape[0], rows, cols), wide)
    for ky in range(kernel):
        for kx in range(kernel):
            window = padded[:, :, ky:ky + stride * rows:stride, kx:kx + stride * cols:stride]
            result += np.einsum("nchw,kc->nkhw", window, weight[:, :, ky, kx].astype(wide))
    return result
