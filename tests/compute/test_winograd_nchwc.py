"""Winograd F(2x2) and F(4x4) 3x3 convs equal the direct convolution, whatever the tile
leaves over at the edges."""

from __future__ import annotations

import numpy as np
import pytest
import tvm
from tvm import te, topi

from tvm_fuse import schedules
from tvm_fuse.compute.winograd_nchwc import (
    choose_tile,
    conv2d_winograd_nchwc,
    transform_weight,
)
from tvm_fuse.pipeline import TIR_PIPELINE
from tvm_fuse.target import parse_target, vector_lanes


def _direct(x: np.ndarray, w: np.ndarray, padding) -> np.ndarray:
    """NCHW{c}c 3x3 stride-1 conv in numpy, weights OIHW{c}i{c}o."""
    top, left, bottom, right = padding
    n, _, h, width, _ = x.shape
    padded = np.pad(x, [(0, 0), (0, 0), (top, bottom), (left, right), (0, 0)])
    out_h, out_w = h + top + bottom - 2, width + left + right - 2
    out = np.zeros((n, w.shape[0], out_h, out_w, w.shape[5]), np.float64)
    for ky in range(3):
        for kx in range(3):
            window = padded[:, :, ky:ky + out_h, kx:kx + out_w, :]
            out += np.einsum("nchwi,ocib->nohwb", window, w[:, :, ky, kx])
    return out


@pytest.mark.parametrize("tile", [2, 4])
@pytest.mark.parametrize("shape, padding", [
    ((1, 2, 14, 14, 16), (1, 1, 1, 1)),
    ((2, 1, 13, 9, 8), (1, 1, 1, 1)),  # tiles overhang both edges; batch 2; half blocks
    ((1, 2, 10, 11, 16), (0, 1, 2, 0)),  # asymmetric padding
])
def test_winograd_equals_the_direct_conv(tile, shape, padding):
    rng = np.random.default_rng(0)
    block = shape[4]
    x = rng.standard_normal(shape).astype("float32")
    w = (rng.standard_normal((3, shape[1], 3, 3, block, block)) / np.sqrt(9 * shape[1] * block)).astype("float32")
    transformed = transform_weight(w, tile)
    data = te.placeholder(shape, name="x")
    weight = te.placeholder(transformed.shape, name="u")
    out = topi.nn.relu(conv2d_winograd_nchwc(data, weight, padding, tile))
    target = parse_target(None)
    scheduled = schedules.apply(te.create_prim_func([data, weight, out]), vector_lanes(target))
    kernel = tvm.compile(tvm.IRModule({"main": scheduled}), target=target, tir_pipeline=TIR_PIPELINE)
    result = tvm.runtime.tensor(np.zeros([int(d) for d in out.shape], "float32"))
    kernel["main"](tvm.runtime.tensor(x), tvm.runtime.tensor(transformed), result)
    expected = np.maximum(_direct(x, w, padding), 0)
    # F(4x4)'s transforms round more than the direct sum; both stay within fp32 noise.
    np.testing.assert_allclose(result.numpy(), expected, rtol=1e-4, atol=1e-4 * np.abs(expected).max())


@pytest.mark.parametrize("side, tile", [(56, 4), (28, 4), (14, 4), (12, 4), (11, 2), (7, 2), (6, 2), (5, None)])
def test_the_tile_follows_the_output_size(side, tile):
    assert choose_tile(side, side) == tile
