"""The bf16 Winograd conv computes Winograd's algorithm on the bf16-rounded transformed input and
weights, summed in fp32: on `vdpbf16ps` where the host has AVX512-BF16, and everywhere in the
instruction's portable form; from fp32 data and from bf16 data alike."""

from __future__ import annotations

import numpy as np
import pytest
import tvm
from tvm import te, topi

from tests.compute.test_winograd_nchwc import _direct
from tvm_fuse.compute.bf16 import bits_of, value_of
from tvm_fuse.compute.winograd_nchwc import transform_matrices, transform_weight
from tvm_fuse.compute.winograd_nchwc_bf16 import conv2d_winograd_nchwc_bf16, transform_weight_bf16
from tvm_fuse.ir_names import KNOBS_ATTR
from tvm_fuse.pipeline import TIR_PIPELINE
from tvm_fuse.schedules import apply
from tvm_fuse.target import parse_target


def _rounded(values: np.ndarray) -> np.ndarray:
    return value_of(bits_of(values.astype(np.float32))).astype(np.float64)


def _winograd_in_bf16(x: np.ndarray, w: np.ndarray, padding, tile: int) -> np.ndarray:
    """numpy's Winograd conv with the transformed input and weights rounded to bf16, as the
    kernel computes it (in float64 elsewhere)."""
    a, b, _ = transform_matrices(tile)
    top, left, bottom, right = padding
    n, _, h, width, _ = x.shape
    out_h, out_w = h + top + bottom - 2, width + left + right - 2
    tiles_h, tiles_w = -(-out_h // tile), -(-out_w // tile)
    padded = np.pad(x.astype(np.float64), [(0, 0), (0, 0), (top, tiles_h * tile + 2 - h - top),
                                           (left, tiles_w * tile + 2 - width - left), (0, 0)])
    alpha = tile + 2
    windows = np.stack([[padded[:, :, y * tile:y * tile + alpha, x_ * tile:x_ * tile + alpha]
                         for x_ in range(tiles_w)] for y in range(tiles_h)])  # [th, tw, n, c, alpha, alpha, ib]
    inputs = _rounded(np.einsum("ae,yxncabi,bv->yxncevi", b, windows, b))
    weights = _rounded(transform_weight(w, tile))  # [alpha, alpha, O, I, ib, ob]
    product = np.einsum("yxncevi,evocib->yxnoevb", inputs, weights)
    tiles = np.einsum("ea,yxnoevb,vc->nyxoacb", a, product, a)  # [n, th, tw, o, tile, tile, ob]
    out = tiles.transpose(0, 3, 1, 4, 2, 5, 6).reshape(n, w.shape[0], tiles_h * tile, tiles_w * tile, w.shape[5])
    return out[:, :, :out_h, :out_w]


@pytest.mark.parametrize("native", [pytest.param(True, marks=pytest.mark.bf16), False])
@pytest.mark.parametrize("data_dtype", ["float32", "uint16"])
@pytest.mark.parametrize("tile, shape, padding", [
    (2, (1, 2, 14, 14, 16), (1, 1, 1, 1)),
    (2, (2, 1, 13, 9, 8), (1, 1, 1, 1)),  # tiles overhang both edges; batch 2; half blocks
    (4, (1, 2, 10, 11, 16), (0, 1, 2, 0)),  # asymmetric padding
])
def test_bf16_winograd_is_winograd_on_rounded_operands(native, data_dtype, tile, shape, padding):
    rng = np.random.default_rng(0)
    block = shape[4]
    x = rng.standard_normal(shape).astype("float32")
    w = (rng.standard_normal((3, shape[1], 3, 3, block, block)) / np.sqrt(9 * shape[1] * block)).astype("float32")
    if data_dtype == "uint16":  # bf16 activations from a bf16 kernel before
        x_arg, x = bits_of(x), value_of(bits_of(x))
    else:
        x_arg = x
    transformed = transform_weight_bf16(w, tile)
    data = te.placeholder(shape, data_dtype, name="x")
    weight = te.placeholder(transformed.shape, "uint16", name="u")
    out = topi.nn.relu(conv2d_winograd_nchwc_bf16(data, weight, padding, tile, native))
    scheduled = apply(te.create_prim_func([data, weight, out]), 16)
    assert scheduled.attrs[KNOBS_ATTR] == "default"  # scheduled (tensorized) by its rule
    kernel = tvm.compile(tvm.IRModule({"main": scheduled}), target=parse_target("native"), tir_pipeline=TIR_PIPELINE)
    result = tvm.runtime.tensor(np.zeros([int(d) for d in out.shape], "float32"))
    kernel["main"](tvm.runtime.tensor(x_arg), tvm.runtime.tensor(transformed), result)
    expected = np.maximum(_winograd_in_bf16(x, w, padding, tile), 0)
    scale = np.abs(expected).max()
    # The fp32 sums and transforms round; the bf16 roundings are the reference's own.
    np.testing.assert_allclose(result.numpy(), expected, rtol=1e-4, atol=1e-5 * scale)
    # Against the exact conv: the error bf16 costs (F(2x2): ~3e-3 of the largest output).
    exact = np.maximum(_direct(x, w, padding), 0)
    assert np.abs(result.numpy() - exact).max() < (1e-2 if tile == 2 else 3e-2) * scale
