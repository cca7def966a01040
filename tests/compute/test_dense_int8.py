"""The dynamic int8 dense layer: rows quantized on their own ranges, multiplied with s8
weights in s32 (on `vpdpbusd` where the host has VNNI, `vpmaddubsw` on 7-bit weights where
it has AVX-512 only), dequantized in the epilogue."""

from __future__ import annotations

import numpy as np
import pytest
import tvm
from tvm import te

from tvm_fuse.compute.dense_int8 import (
    dense_int8,
    dense_int8_groups,
    dequantize_product,
    pack_dense_quads,
    quantize_rows,
    row_groups,
)
from tvm_fuse.ir_names import KNOBS_ATTR
from tvm_fuse.pipeline import TIR_PIPELINE
from tvm_fuse.quantization.weights import S7_MAX, S8_MAX
from tvm_fuse.schedules import apply
from tvm_fuse.target import parse_target


def _compiled(func):
    scheduled = apply(func, 16)
    assert scheduled.attrs[KNOBS_ATTR] == "default"  # scheduled (tensorized) by its rule
    return tvm.compile(tvm.IRModule({"main": scheduled}), target=parse_target("native"), tir_pipeline=TIR_PIPELINE)


def _group_codes(x: np.ndarray):
    """numpy's quantization in `row_groups`: (codes [..., groups, size], scale, low [..., groups, 1])."""
    groups, size = row_groups(x.shape[-1])
    padded = np.concatenate([x, np.repeat(x[..., -1:], groups * size - x.shape[-1], axis=-1)], axis=-1)
    padded = padded.reshape(*x.shape[:-1], groups, size)
    low, high = padded.min(axis=-1, keepdims=True), padded.max(axis=-1, keepdims=True)
    scale = np.where(high > low, (high - low) / 255, 1).astype(np.float32)
    codes = np.clip(np.rint((padded - low) * (np.float32(1) / scale)), 0, 255)
    codes.reshape(*x.shape[:-1], -1)[..., x.shape[-1]:] = 0
    return codes, scale, low


@pytest.mark.avx512
@pytest.mark.parametrize("shape, groups", [((128, 384), 6), ((2, 7, 100), 2), ((3, 32), 1)])
def test_rows_quantize_in_groups_each_on_its_own_range(shape, groups):
    """An outlier costs only its own group its resolution; the padding of a row (100 values in
    two groups of 52) is code 0."""
    rng = np.random.default_rng(0)
    x = (rng.standard_normal(shape) * rng.uniform(0.1, 10, shape[:-1] + (1,)) + 3).astype(np.float32)
    x[..., 0, :] = 0.5  # a constant row
    x[..., 1, 0] = 30 * np.abs(x[..., 1, :]).max(axis=-1)  # an outlier in the first group
    assert row_groups(shape[-1])[0] == groups
    x_t = te.placeholder(shape, "float32", name="x")
    codes_t, params_t = quantize_rows(x_t, 16)
    kernel = _compiled(te.create_prim_func([x_t, codes_t, params_t]))
    expected, scale, low = _group_codes(x)
    codes = tvm.runtime.tensor(np.zeros(expected.shape, np.uint8))
    params = tvm.runtime.tensor(np.zeros((*expected.shape[:-1], 2), np.float32))
    kernel["main"](tvm.runtime.tensor(x), codes, params)
    np.testing.assert_allclose(params.numpy()[..., 0], scale[..., 0], rtol=1e-6)
    np.testing.assert_array_equal(params.numpy()[..., 1], low[..., 0])
    # Codes equal numpy's but for ties rounded the other way by a last-ulp difference.
    assert np.abs(codes.numpy().astype(int) - expected).max() <= 1
    assert (codes.numpy() != expected).mean() < 1e-3
    real = (low + scale * codes.numpy()).reshape(*shape[:-1], -1)[..., :shape[-1]]
    step = np.broadcast_to(scale, expected.shape).reshape(*shape[:-1], -1)[..., :shape[-1]]
    assert np.all(np.abs(real - x) <= 0.51 * step)
    if groups > 1:  # the outlier's group is coarse, the others as fine as without it
        assert np.all(scale[..., 1, 0, 0] > 10 * scale[..., 1, 1:, 0].max(axis=-1))


@pytest.mark.parametrize("vnni", [pytest.param(True, marks=pytest.mark.vnni), pytest.param(False, marks=pytest.mark.avx512)])
@pytest.mark.parametrize("rows, k, n, block", [(32, 384, 96, 16), ((2, 7), 36, 48, 16), (24, 64, 24, 8)])
def test_int8_dense_on_a_calibrated_scale_equals_the_product_of_the_codes(vnni, rows, k, n, block):
    rows = rows if isinstance(rows, tuple) else (rows,)
    rng = np.random.default_rng(1)
    limit = S8_MAX if vnni else S7_MAX
    codes = rng.integers(0, 256, (*rows, k + -k % 4)).astype(np.uint8)
    codes[..., k:] = 0
    weight = rng.integers(-limit, limit + 1, (k, n)).astype(np.int8)
    packed = pack_dense_quads(weight, block)
    params = np.array([0.04, -1.5], np.float32)  # (scale, low)
    column_sums = weight.astype(np.float32).sum(axis=0)
    column_scales = rng.uniform(0.001, 0.01, n).astype(np.float32)
    tensors = [te.placeholder(a.shape, str(a.dtype), name=name) for a, name in
               [(codes, "codes"), (packed, "w"), (params, "params"), (column_sums, "sums"), (column_scales, "scales")]]
    real = dequantize_product(dense_int8(*tensors[:2], vnni), *tensors[2:])
    out_t = te.compute(real.shape, lambda *i: te.max(real[i], 0.0), name="relu")
    kernel = _compiled(te.create_prim_func([*tensors, out_t]))
    out = tvm.runtime.tensor(np.zeros((*rows, n), np.float32))
    kernel["main"](*(tvm.runtime.tensor(a) for a in (codes, packed, params, column_sums, column_scales)), out)
    acc = codes[..., :k].astype(np.int64) @ weight.astype(np.int64)
    expected = (params[0] * acc + params[1] * column_sums) * column_scales
    np.testing.assert_allclose(out.numpy(), np.maximum(expected, 0), rtol=1e-5, atol=1e-5 * np.abs(expected).max())


@pytest.mark.parametrize("vnni", [pytest.param(True, marks=pytest.mark.vnni), pytest.param(False, marks=pytest.mark.avx512)])
@pytest.mark.parametrize("rows, k, n, block", [(32, 384, 96, 16), ((2, 7), 100, 48, 16), (5, 1536, 24, 8)])
def test_int8_dense_on_groups_of_rows_equals_their_real_values_times_the_weights(vnni, rows, k, n, block):
    """Each group's s32 sum scaled by its own (scale, low): 100 values in two groups of 52 (the
    padding is code 0 against zero weights), 1536 in 24 of 64."""
    rows = rows if isinstance(rows, tuple) else (rows,)
    rng = np.random.default_rng(2)
    groups, size = row_groups(k)
    limit = S8_MAX if vnni else S7_MAX
    codes = rng.integers(0, 256, (*rows, groups, size)).astype(np.uint8)
    codes.reshape(*rows, -1)[..., k:] = 0
    weight = np.zeros((groups * size, n), np.int8)
    weight[:k] = rng.integers(-limit, limit + 1, (k, n))
    params = np.stack([rng.uniform(0.01, 0.1, (*rows, groups)), rng.uniform(-3, 0, (*rows, groups))], axis=-1)
    params = params.astype(np.float32)
    column_sums = weight.astype(np.float32).reshape(groups, size, n).sum(axis=1)
    tensors = [te.placeholder(a.shape, str(a.dtype), name=name) for a, name in
               [(codes, "codes"), (params, "params"), (pack_dense_quads(weight, block), "w"), (column_sums, "sums")]]
    real = dense_int8_groups(*tensors, vnni)
    out_t = te.compute(real.shape, lambda *i: te.max(real[i], 0.0), name="relu")
    kernel = _compiled(te.create_prim_func([*tensors, out_t]))
    out = tvm.runtime.tensor(np.zeros((*rows, n), np.float32))
    kernel["main"](*(tvm.runtime.tensor(a) for a in (codes, params, pack_dense_quads(weight, block), column_sums)), out)
    values = params[..., 1:] + params[..., :1] * codes  # each group's real values
    values.reshape(*rows, -1)[..., k:] = 0
    expected = values.reshape(*rows, -1).astype(np.float64) @ weight.astype(np.float64)
    np.testing.assert_allclose(out.numpy(), np.maximum(expected, 0), rtol=1e-5, atol=1e-5 * np.abs(expected).max())
