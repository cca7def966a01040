"""int8 builds of a residual block: what runs in int8, how close it stays to fp32, and the
instructions its kernels use."""

from __future__ import annotations

import re

import numpy as np
import pytest
import tvm
from tvm import relax

import tvm_fuse
from tests.conftest import ort_outputs
from tvm_fuse import CalibrationTable, QuantConfig
from tvm_fuse.calibration_table import TensorScale
from tvm_fuse.frontend import relax_module
from tvm_fuse.pipeline import optimize
from tvm_fuse.target import parse_target
from tvm_fuse.transform.realize.int8 import RealizeInt8

from .models import (
    classifier,
    conv_chain,
    inception_branches,
    inverted_residual,
    residual_block,
    split_bottleneck,
    stem,
)

SAMPLES = np.random.default_rng(1).standard_normal((8, 32, 16, 16)).astype(np.float32)
# Tensors the block's int8 kernels read and write, with plausible scales (no calibration run).
TABLE = CalibrationTable({"x": TensorScale(0.03, 128), "a": TensorScale(0.02, 0), "b": TensorScale(0.03, 0)},
                         "minmax")


def _worst_error(compiled, model, feed) -> float:
    """The largest difference of `compiled`'s output from ONNX Runtime's fp32 output,
    relative to the largest output value."""
    (ours,), (reference,) = compiled.run(None, feed), ort_outputs(model, feed)
    return float(np.abs(ours - reference).max() / np.abs(reference).max())


def _int8_patterns(model) -> list[str]:
    return [k["pattern"] for k in model.fusion_report()["kernels"] if k["int8"]]


@pytest.mark.parametrize("cpu, instruction, registers", [("cascadelake", "vpdpbusd", "zmm"),
                                                         ("skylake-avx512", "vpmaddubsw", "zmm"),
                                                         ("haswell", "vpmaddubsw", "ymm")])
def test_int8_kernels_use_the_targets_dot_product(cpu, instruction, registers):
    """Compiles only: runs on any host."""
    model = tvm_fuse.build(residual_block(), f"llvm -mcpu={cpu}", quantize=QuantConfig(calibration=TABLE))
    assembly = model.assembly()
    assert re.search(rf"{instruction}\s+%{registers}", assembly)
    assert len(_int8_patterns(model)) == 3


def test_without_avx2_the_model_builds_in_fp32():
    with pytest.warns(UserWarning, match="int8 kernels need AVX2"):
        model = tvm_fuse.build(residual_block(), "llvm -mcpu=sandybridge", quantize=QuantConfig(calibration=TABLE))
    assert _int8_patterns(model) == []


@pytest.mark.vnni
@pytest.mark.parametrize("method", ["minmax", "entropy", "percentile"])
def test_a_calibrated_block_stays_close_to_fp32(method):
    model = residual_block()
    table = tvm_fuse.quantize(model, SAMPLES, method=method)
    assert set(table.tensors) == {"x", "a", "b", "y"}  # what the int8 kernels read and write
    int8 = tvm_fuse.build(model, quantize=QuantConfig(calibration=table))
    # conv2 reads conv1's u8 output and adds x dequantized; conv3 reads conv2's u8 output.
    assert sorted(_int8_patterns(int8)) == ["conv2d+bias", "conv2d+bias+relu", "conv2d+bias+sum+relu"]
    feed = {"x": np.random.default_rng(2).standard_normal((1, 32, 16, 16)).astype(np.float32)}
    (ours,), (reference,) = int8.run(None, feed), ort_outputs(model, feed)
    # Entropy and percentile clip the rarest values (on purpose: finer steps for the rest),
    # so only minmax bounds every error: a few percent of the range after three u8 layers.
    assert np.corrcoef(ours.ravel(), reference.ravel())[0, 1] > 0.99
    assert np.abs(ours - reference).mean() <= 0.1 * np.abs(reference).mean()
    if method == "minmax":
        assert np.abs(ours - reference).max() <= 0.05 * np.abs(reference).max()


@pytest.mark.avx2
def test_avx2_int8_kernels_stay_close_to_fp32():
    """AVX2's 8-lane vpmaddubsw kernels (7-bit weights), as on AVX-512 without VNNI."""
    model = residual_block()
    haswell = tvm_fuse.build(model, "llvm -mcpu=haswell", quantize=QuantConfig(calibration=TABLE))
    assert len(_int8_patterns(haswell)) == 3
    assert _worst_error(haswell, model, {"x": SAMPLES[:1]}) <= 0.08


@pytest.mark.avx512
def test_avx512_without_vnni_keeps_weights_from_saturating():
    """The vpmaddubsw kernels (7-bit weights) agree with the VNNI ones to within their rounding."""
    model = residual_block()
    feed = {"x": SAMPLES[:1]}
    skylake = tvm_fuse.build(model, "llvm -mcpu=skylake-avx512", quantize=QuantConfig(calibration=TABLE))
    assert _worst_error(skylake, model, feed) <= 0.08


@pytest.mark.vnni
def test_an_excluded_node_stays_fp32_and_the_model_runs(tmp_path):
    model = residual_block()
    path = tmp_path / "block.calib.json"
    tvm_fuse.quantize(model, SAMPLES, method="minmax").save(path)
    int8 = tvm_fuse.build(model, quantize=QuantConfig(calibration=str(path), exclude=["conv2"]))
    assert sorted(_int8_patterns(int8)) == ["conv2d+bias", "conv2d+bias+relu"]
    feed = {"x": SAMPLES[:1]}
    assert _worst_error(int8, model, feed) <= 0.05


@pytest.mark.avx512
def test_constant_calibration_data_gives_finite_scales():
    table = tvm_fuse.quantize(residual_block(), np.zeros((2, 32, 16, 16), np.float32))
    assert all(np.isfinite(s.scale) and s.scale > 0 for s in table.tensors.values())


def _int8_calls(model_proto, table, op: str, exclude=()) -> list[relax.VarBinding]:
    """The bindings of `main` calling `op` in the int8 build, as the kernels are about to be
    scheduled."""
    imported = relax_module(model_proto)
    mod = optimize(imported.mod, parse_target("llvm -mcpu=cascadelake"),
                   int8=RealizeInt8(imported.onnx, table, vnni=True, exclude=exclude))
    return [b for block in mod["main"].body.blocks for b in block.bindings
            if isinstance(b.value, relax.Call) and b.value.op.same_as(tvm.ir.Op.get(op))]


def _kernel_dtypes(model_proto, table, exclude=()) -> list[tuple[str, str]]:
    """(name, output dtype) of each kernel call in the int8 build."""
    return [(b.value.args[0].name_hint, b.var.ty.dtype)
            for b in _int8_calls(model_proto, table, "relax.call_tir", exclude)]


@pytest.mark.vnni
@pytest.mark.parametrize("pool_scale", [None, 2.0])
def test_the_image_conv_and_max_pool_run_in_int8(pool_scale):
    """The 3-channel conv reads its input padded to 4 channels (the pad a real zero),
    quantized straight from NCHW; the
    max-pool after it works on its u8 codes, so the convs after it (one adding it as the
    residual) read them with no rounding, on the scale of the pool's input whatever the
    table gives the pool's output (`pool_scale`: twice it)."""
    model = stem()
    samples = np.random.default_rng(3).standard_normal((8, 3, 32, 32)).astype(np.float32)
    table = tvm_fuse.quantize(model, samples, method="minmax")
    if pool_scale:
        scale = table.tensors["p"]
        table.tensors["p"] = TensorScale(scale.scale * pool_scale, scale.zero_point)
    int8 = tvm_fuse.build(model, quantize=QuantConfig(calibration=table))
    assert sorted(_int8_patterns(int8)) == ["conv2d+relu", "conv2d+relu", "conv2d+sum+relu"]
    pools = _int8_calls(model, table, "relax.nn.max_pool2d")
    assert [b.value.args[0].ty.dtype for b in pools] == ["uint8"]
    # The image goes to u8 NCHW4c in one kernel: no fp32 NCHW3c copy of it is made first.
    assert "x" not in [b.value.args[0].name for b in _int8_calls(model, table, "relax.layout_transform")]
    feed = {"x": samples[:1]}
    assert _worst_error(int8, model, feed) <= 0.03


@pytest.mark.vnni
@pytest.mark.parametrize("channels", [16, 24])
def test_mobilenets_block_runs_its_pointwise_convs_in_int8(channels):
    """MobileNetV2's block: the expand and project convs run in int8 (with 24 channels, in
    blocks of 8), the depthwise conv between them in fp32 (see docs/int8.md) writing the
    project conv's u8 codes itself (no quantize kernel of its own), and the result stays
    close to fp32."""
    model = inverted_residual(channels)
    samples = np.random.default_rng(4).standard_normal((8, channels, 16, 16)).astype(np.float32)
    table = tvm_fuse.quantize(model, samples, method="minmax")
    int8 = tvm_fuse.build(model, quantize=QuantConfig(calibration=table))
    assert sorted(_int8_patterns(int8)) == ["conv2d+clip", "conv2d+sum"]
    kernels = dict(_kernel_dtypes(model, table))
    assert kernels["depthwise_conv2d_clip"] == "uint8"
    assert [name for name in kernels if name.startswith("quantize")] == ["quantize"]  # the input's
    feed = {"x": samples[:1]}
    assert _worst_error(int8, model, feed) <= 0.05


@pytest.mark.vnni
def test_a_concat_of_int8_convs_passes_u8_codes_on_its_own_scale():
    """The two branches write their codes on the concat's scale, so the concat joins u8
    tensors and the conv reading it gets them with no requantizing."""
    model = inception_branches()
    samples = np.random.default_rng(5).standard_normal((8, 16, 14, 14)).astype(np.float32)
    table = tvm_fuse.quantize(model, samples, method="minmax")
    assert "c" in table.tensors  # calibration measures the concat too
    int8 = tvm_fuse.build(model, quantize=QuantConfig(calibration=table))
    assert sorted(_int8_patterns(int8)) == ["conv2d", "conv2d+relu", "conv2d+relu"]
    concats = _int8_calls(model, table, "relax.concat")
    assert [b.var.ty.dtype for b in concats] == ["uint8"]
    feed = {"x": samples[:1]}
    assert _worst_error(int8, model, feed) <= 0.03


@pytest.mark.vnni
def test_int8_convs_of_one_shape_share_a_kernel_each_on_its_own_scales():
    """The scales a conv requantizes with are its kernel's parameters, not constants of its code:
    the chain's convs after the first (one shape, one pattern, three scales) call one kernel, and
    each still writes its own scale's codes (the output matches fp32)."""
    model = conv_chain(depth=4)
    samples = np.random.default_rng(6).standard_normal((8, 16, 14, 14)).astype(np.float32)
    table = tvm_fuse.quantize(model, samples, method="minmax")
    assert len({table.tensors[f"a{i}"].scale for i in range(1, 4)}) == 3
    calls = [b.value for b in _int8_calls(model, table, "relax.call_tir")
             if b.value.args[0].name_hint.startswith("int8_conv2d")]
    assert len(calls) == 5
    assert len({call.args[0] for call in calls[1:4]}) == 1
    int8 = tvm_fuse.build(model, quantize=QuantConfig(calibration=table))
    assert _worst_error(int8, model, {"x": samples[:1]}) <= 0.03


@pytest.mark.avx512
@pytest.mark.parametrize("batch, exclude, s8_weights", [(1, [], True), (1, ["Gemm"], False), (32, [], False)])
def test_a_classifier_reads_s8_weights_at_small_batch(batch, exclude, s8_weights):
    """The dense layer of a CNN's head at batch 1 reads s8 weights (a scale per class, 1000
    classes packed in blocks of 8), which moves its outputs by under 1.5% of the largest
    (rounding each weight to 1/254 of its class's largest: about 1% here);
    excluded, or with more rows than `MAX_WEIGHT_BOUND_ROWS`, it keeps its fp32 weights."""
    model = classifier(batch)
    samples = np.random.default_rng(6).standard_normal((4 * batch, 32, 8, 8)).astype(np.float32)
    table = tvm_fuse.quantize(model, samples, method="minmax")
    int8 = tvm_fuse.build(model, quantize=QuantConfig(calibration=table, exclude=exclude))
    kernels = [name for name, _ in _kernel_dtypes(model, table, exclude)]
    assert any(name.startswith("s8_weights_dense") for name in kernels) == s8_weights
    feed = {"x": samples[:batch]}
    assert _worst_error(int8, model, feed) <= 0.02  # mostly the int8 conv's rounding
    if s8_weights:
        fp32_weights = tvm_fuse.build(model, quantize=QuantConfig(calibration=table, exclude=["Gemm"]))
        (ours,), (reference,) = int8.run(None, feed), fp32_weights.run(None, feed)
        assert np.abs(ours - reference).max() <= 0.015 * np.abs(reference).max()


@pytest.mark.vnni
@pytest.mark.parametrize("sizes", [False, True])
def test_convs_that_read_the_halves_of_a_split_run_in_int8(sizes):
    """YOLOv8's C2f: the bottleneck's convs read a Split's second output (and add it); they
    are int8 too, calibrated on the split's own output (they stayed fp32 when only a node's
    first output had a name), the split given by its count or its sizes (then split in the
    blocked layout, `BlockedSplits`)."""
    model = split_bottleneck(sizes=sizes)
    samples = np.random.default_rng(5).standard_normal((8, 16, 16, 16)).astype(np.float32)
    table = tvm_fuse.quantize(model, samples, method="minmax")
    assert "b" in table.tensors
    int8 = tvm_fuse.build(model, quantize=QuantConfig(calibration=table))
    assert sorted(_int8_patterns(int8)) == ["conv2d", "conv2d+relu", "conv2d+relu", "conv2d+sum"]
    assert _worst_error(int8, model, {"x": samples[:1]}) <= 0.03
