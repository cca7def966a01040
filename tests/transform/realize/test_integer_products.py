"""RealizeIntegerProducts: a dynamically quantized model's MatMulInteger with s8 weights runs on
an int8 kernel (`vpdpbusd` with VNNI), exactly as ONNX Runtime sums it; products it cannot
take (weights past 8 bits about their zero point, 8-bit weights without VNNI) stay fp32."""

from __future__ import annotations

import re

import numpy as np
import pytest
from onnxruntime.quantization import QuantType

import tvm_fuse
from tests.conftest import AVX512_TARGET, assert_close, dense_model
from tests.frontend.test_dynamic_quantization import _integer_product_model, _quantized, _reference
from tests.frontend.test_recurrent import _recurrent_model

VNNI_TARGET = "llvm -mcpu=cascadelake -num-cores=2"
AVX2_TARGET = "llvm -mcpu=haswell -num-cores=2"


def _product_model(weight: np.ndarray, x_zero_point: int, rows: int = 7):
    return _integer_product_model("MatMulInteger", (rows, weight.shape[0]), weight, np.array(x_zero_point, np.uint8),
                                  np.array(0, np.int8))


def _precision(compiled: tvm_fuse.CompiledModel) -> str:
    (kernel,) = [k for k in compiled.fusion_report()["kernels"] if "product" in k["onnx_nodes"][0]]
    return kernel["precision"]


def _extreme_codes(rng, shape, low, high, dtype):
    """Random codes with the range's ends over-represented: the sums that would saturate."""
    codes = rng.integers(low, high + 1, shape)
    ends = rng.random(shape) < 0.3
    return np.where(ends, np.where(rng.random(shape) < 0.5, low, high), codes).astype(dtype)


@pytest.mark.vnni
@pytest.mark.parametrize("x_zero_point", [0, 131])
@pytest.mark.parametrize("rows", [1, 7, 40])
def test_s8_weights_run_in_int8_and_equal_onnx_runtime_exactly(x_zero_point, rows):
    rng = np.random.default_rng(rows)
    weight = _extreme_codes(rng, (96, 40), -128, 127, np.int8)
    model = _product_model(weight, x_zero_point, rows)
    feed = {"x": _extreme_codes(rng, (rows, 96), 0, 255, np.uint8)}
    compiled = tvm_fuse.build(model, "native")
    assert _precision(compiled) == "int8"
    ours = compiled.run(None, feed)[0]
    assert ours.dtype == np.int32
    np.testing.assert_array_equal(ours, _reference(model, feed)[0])


@pytest.mark.vnni
def test_a_quantize_dynamic_model_runs_its_products_in_int8_and_matches_onnx_runtime(tmp_path):
    quantized = _quantized(dense_model((3, 8), 64, 48), tmp_path, "MatMul", weight_type=QuantType.QInt8)
    feed = {"x": np.random.default_rng(2).standard_normal((3, 8, 64)).astype(np.float32)}
    compiled = tvm_fuse.build(quantized, "native")
    assert [k["precision"] for k in compiled.fusion_report()["kernels"] if k["pattern"].startswith("dense")] == ["int8"]
    assert_close(compiled.run(None, feed), _reference(quantized, feed), 1e-5)


def test_the_int8_kernel_multiplies_with_vpdpbusd():
    weight = np.random.default_rng(0).integers(-128, 128, (96, 48)).astype(np.int8)
    compiled = tvm_fuse.build(_product_model(weight, 120), VNNI_TARGET)
    assert _precision(compiled) == "int8"
    assert re.search(r"\bvpdpbusd\b", compiled.assembly())


@pytest.mark.parametrize("bound, precision", [(64, "int8"), (128, "fp32")])
def test_without_vnni_only_weights_of_7_bits_run_in_int8(bound, precision):
    """AVX2's u8 x s8 pairs sum in int16 (`vpmaddubsw`), which 8-bit weights can saturate."""
    weight = np.random.default_rng(0).integers(-bound, bound, (96, 48)).astype(np.int8)
    assert _precision(tvm_fuse.build(_product_model(weight, 120), AVX2_TARGET)) == precision


@pytest.mark.parametrize("weight", [
    np.full((96, 48), -128, np.int8),  # about a zero point of 3: -131, past 8 bits
    np.ones((18, 48), np.int8),  # a depth whole quads do not cover
    np.ones((96, 1), np.int8),  # a column the kernel's blocks do not cover
], ids=["past_8_bits", "odd_depth", "one_column"])
def test_products_an_int8_kernel_cannot_take_stay_fp32_and_exact(weight):
    zero_point = 3 if weight.shape[0] == 96 else 0
    model = _integer_product_model("MatMulInteger", (5, weight.shape[0]), weight, np.array(7, np.uint8),
                                   np.array(zero_point, np.int8))
    compiled = tvm_fuse.build(model, AVX512_TARGET if "avx512f" in tvm_fuse.host_features() else "native")
    assert _precision(compiled) == "fp32"
    if "avx512f" in tvm_fuse.host_features():
        feed = {"x": np.random.default_rng(1).integers(0, 256, (5, weight.shape[0])).astype(np.uint8)}
        np.testing.assert_array_equal(compiled.run(None, feed)[0], _reference(model, feed)[0])


@pytest.mark.parametrize("target, vnni", [(VNNI_TARGET, True), (AVX2_TARGET, False)], ids=["vnni", "avx2"])
def test_a_quantize_dynamic_lstm_steps_on_vpdpbusd_where_the_target_has_it(target, vnni, tmp_path):
    """Its sequence kernel multiplies each step's state codes by R's s8 codes with `vpdpbusd`
    (`compute.recurrent.lstm_vnni_sequence`), not `vpmaddwd` on int16 codes."""
    model, _ = _recurrent_model("LSTM", features=16, hidden=8, seq=6)
    assembly = tvm_fuse.build(_quantized(model, tmp_path, "LSTM"), target).assembly()
    assert ("lstm_vnni" in assembly) == vnni
