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
from tvm_fuse.errors import InputError
from tvm_fuse.models.built import transformer_encoder

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
    # Per-token scales: each row's error is about 1% of its own range.
    assert np.abs(ours - reference).max() <= 0.03 * np.abs(reference).max()
    cosine = (ours * reference).sum(-1) / np.linalg.norm(ours, axis=-1) / np.linalg.norm(reference, axis=-1)
    assert cosine.min() > 0.999


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


def test_on_amx_the_dense_layers_run_tdpbusd(encoder):
    """Compiles only: runs on any host."""
    model = tvm_fuse.build(encoder, "llvm -mcpu=sapphirerapids", quantize=DYNAMIC)
    assert re.search(r"tdpbusd\s+%tmm", model.assembly())
    assert model.uses_amx and all(k["int8"] for k in _kernels(model) if k["pattern"].startswith("dense"))


@pytest.mark.amx
def test_an_encoder_on_amx_tiles_stays_close_to_fp32(encoder):
    feed = {"hidden_states": np.random.default_rng(0).standard_normal((2, 32, 64)).astype(np.float32)}
    model = tvm_fuse.build(encoder, quantize=DYNAMIC)  # native: AMX where the OS grants it
    assert model.uses_amx
    (ours,), (reference,) = model.run(None, feed), ort_outputs(encoder, feed)
    assert np.abs(ours - reference).max() <= 0.03 * np.abs(reference).max()


@pytest.mark.vnni
def test_a_calibrated_encoder_runs_its_dense_layers_in_int8_close_to_fp32(encoder):
    rng = np.random.default_rng(3)
    samples = [{"hidden_states": rng.standard_normal((2, 32, 64)).astype(np.float32)} for _ in range(4)]
    model = tvm_fuse.build(encoder, AVX512_TARGET, quantize=QuantConfig(calibration=samples, method="minmax"))
    denses = [k for k in _kernels(model) if k["pattern"].startswith("dense")]
    assert denses and all(k["int8"] for k in denses)
    feed = {"hidden_states": rng.standard_normal((2, 32, 64)).astype(np.float32)}
    (ours,), (reference,) = model.run(None, feed), ort_outputs(encoder, feed)
    # One scale per tensor, calibrated on four random batches: 3.1% measured (dynamic: 1.4%).
    assert np.abs(ours - reference).max() <= 0.05 * np.abs(reference).max()

