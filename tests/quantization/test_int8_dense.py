"""int8 dense layers: `QuantConfig(activations="dynamic")` (input rows quantized at run time, no
calibration) and calibrated scales; what runs in int8, how close it stays to fp32, the
instructions."""

from __future__ import annotations

import re

import numpy as np
import pytest

import tvm_fuse
from tests.conftest import AVX512_TARGET, ort_outputs
from tvm_fuse import QuantConfig
from tvm_fuse.benchmarking.models.built import transformer_encoder
from tvm_fuse.errors import InputError

DYNAMIC = QuantConfig(activations="dynamic")


@pytest.fixture(scope="module")
def encoder():
    return transformer_encoder(batch=2, seq_len=32, hidden=64)


def _kernels(model) -> list[dict]:
    return model.fusion_report()["kernels"]


@pytest.mark.parametrize("tokens", [32, 1])
def test_every_dense_layer_of_an_encoder_runs_in_int8_on_vnni(tokens):
    """Compiles only: runs on any host. One token too: few rows gain as much."""
    encoder = transformer_encoder(batch=2, seq_len=tokens, hidden=64)
    model = tvm_fuse.build(encoder, "llvm -mcpu=cascadelake", quantize=DYNAMIC)
    denses = [k for k in _kernels(model) if k["pattern"].startswith("dense")]
    assert denses and all(k["int8"] for k in denses)
    assert re.search(r"vpdpbusd\s+%zmm", model.assembly())


@pytest.mark.vnni
def test_an_encoder_stays_close_to_fp32(encoder):
    feed = {"hidden_states": np.random.default_rng(0).standard_normal((2, 32, 64)).astype(np.float32)}
    (ours,) = tvm_fuse.build(encoder, AVX512_TARGET, quantize=DYNAMIC).run(None, feed)
    (reference,) = ort_outputs(encoder, feed)
    # A scale per group of a row: each value's error is about 1% of its group's range.
    assert np.abs(ours - reference).max() <= 0.03 * np.abs(reference).max()
    cosine = (ours * reference).sum(-1) / np.linalg.norm(ours, axis=-1) / np.linalg.norm(reference, axis=-1)
    assert cosine.min() > 0.999


@pytest.mark.vnni
def test_one_dynamic_build_serves_every_sequence_length():
    """Sequence symbolic: each length's output equals the build for that length (the same
    codes, groups and sums), and stays close to fp32. Rows of 128 and 512 values: 2 and 8
    groups."""
    encoder = transformer_encoder(batch=1, seq_len="sequence", hidden=128, heads=4, ffn=512)
    symbolic = tvm_fuse.build(encoder, AVX512_TARGET, quantize=DYNAMIC)
    rng = np.random.default_rng(5)
    for length in (1, 7, 33):
        feed = {"hidden_states": rng.standard_normal((1, length, 128)).astype(np.float32)}
        static = tvm_fuse.build(encoder, AVX512_TARGET, quantize=DYNAMIC,
                                input_shapes={"hidden_states": (1, length, 128)})
        (ours,), (theirs,) = symbolic.run(None, feed), static.run(None, feed)
        np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-5 * np.abs(theirs).max())
        (reference,) = ort_outputs(encoder, feed)
        assert np.abs(ours - reference).max() <= 0.03 * np.abs(reference).max()


@pytest.mark.avx512
def test_avx512_without_vnni_keeps_weights_from_saturating(encoder):
    feed = {"hidden_states": np.random.default_rng(1).standard_normal((2, 32, 64)).astype(np.float32)}
    model = tvm_fuse.build(encoder, "llvm -mcpu=skylake-avx512", quantize=DYNAMIC)
    assert "vpdpbusd" not in model.assembly()
    (ours,), (reference,) = model.run(None, feed), ort_outputs(encoder, feed)
    # 7-bit weights: about twice VNNI's error (2.6% against 1.4% here); saturated sums would be far off.
    assert np.abs(ours - reference).max() <= 0.05 * np.abs(reference).max()


def test_excluded_layers_stay_fp32(encoder):
    first = next(n.name for n in encoder.graph.node if n.op_type in ("MatMul", "Gemm"))
    model = tvm_fuse.build(encoder, "llvm -mcpu=cascadelake", quantize=QuantConfig(activations="dynamic",
                                                                                   exclude=[first]))
    kernels = [k for k in _kernels(model) if k["pattern"].startswith("dense")]
    assert [k["int8"] for k in kernels if first in k["onnx_nodes"]] == [False]
    assert sum(k["int8"] for k in kernels) == len(kernels) - 1


@pytest.mark.parametrize("arguments, message", [({"activations": "dynamic", "calibration": "x.npy"}, "drop calibration"),
                                                ({"activations": "per-token"}, "choose one of static, dynamic"),
                                                ({}, "needs calibration")])
def test_bad_configs_are_named(arguments, message):
    with pytest.raises(InputError, match=message):
        QuantConfig(**arguments)


def _calibrated(seed: int) -> QuantConfig:
    rng = np.random.default_rng(seed)
    samples = [{"hidden_states": rng.standard_normal((2, 32, 64)).astype(np.float32)} for _ in range(4)]
    return QuantConfig(calibration=samples, method="minmax")


@pytest.mark.parametrize("mode", ["dynamic", "calibrated"])
def test_on_amx_the_dense_layers_run_tdpbusd(encoder, mode):
    """Compiles only: runs on any host. Dynamic: a tile program per group of 64 values."""
    quantize = DYNAMIC if mode == "dynamic" else _calibrated(3)
    model = tvm_fuse.build(encoder, "llvm -mcpu=sapphirerapids", quantize=quantize)
    assert re.search(r"tdpbusd\s+%tmm", model.assembly()) and "vpdpbusd" not in model.assembly()
    assert model.uses_amx and all(k["int8"] for k in _kernels(model) if k["pattern"].startswith("dense"))


@pytest.mark.amx
@pytest.mark.parametrize("mode", ["dynamic", "calibrated"])
def test_an_encoder_on_amx_tiles_stays_close_to_fp32(encoder, mode):
    quantize = DYNAMIC if mode == "dynamic" else _calibrated(3)
    model = tvm_fuse.build(encoder, quantize=quantize)  # native: AMX where the OS grants it
    assert model.uses_amx
    feed = {"hidden_states": np.random.default_rng(4).standard_normal((2, 32, 64)).astype(np.float32)}
    (ours,), (reference,) = model.run(None, feed), ort_outputs(encoder, feed)
    assert np.abs(ours - reference).max() <= 0.05 * np.abs(reference).max()  # as the VNNI build below


@pytest.mark.vnni
def test_a_calibrated_encoder_runs_its_dense_layers_in_int8_close_to_fp32(encoder):
    model = tvm_fuse.build(encoder, AVX512_TARGET, quantize=_calibrated(3))
    denses = [k for k in _kernels(model) if k["pattern"].startswith("dense")]
    assert denses and all(k["int8"] for k in denses)
    feed = {"hidden_states": np.random.default_rng(4).standard_normal((2, 32, 64)).astype(np.float32)}
    (ours,), (reference,) = model.run(None, feed), ort_outputs(encoder, feed)
    # One scale per tensor, calibrated on four random batches: 3.1% measured (dynamic: 1.4%).
    assert np.abs(ours - reference).max() <= 0.05 * np.abs(reference).max()

