"""The tvm-fuse command, run as a user runs it."""

import json
import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.conftest import AVX512_TARGET, tiny_model
from tvm_fuse import cli, host_features
from tvm_fuse.transform.lower_composites import WINOGRAD_SWITCH


def tvm_fuse_cmd(*args, cwd=None):
    return subprocess.run(
        [sys.executable, "-m", "tvm_fuse.cli", *args], capture_output=True, text=True, cwd=cwd, timeout=600
    )


@pytest.mark.parametrize("command", [[], ["build"], ["run"], ["bench"], ["explain"], ["tune"], ["quantize"]])
def test_help_documents_every_command(command, capsys):
    with pytest.raises(SystemExit) as exited:
        cli.main([*command, "--help"])
    assert exited.value.code == 0
    text = capsys.readouterr().out
    assert "usage: tvm-fuse" in text
    if command:
        assert "--target" in text and "skylake-avx512" in text


@pytest.mark.avx512
def test_build_then_run_the_exported_library(tmp_path):
    model_path = tmp_path / "tiny.onnx"
    onnx.save(tiny_model(batch=2), model_path)
    built = tvm_fuse_cmd("build", str(model_path), "--target", AVX512_TARGET, "-o", str(tmp_path / "tiny.so"))
    assert built.returncode == 0, built.stderr
    assert (tmp_path / "tiny.so").exists() and (tmp_path / "tiny.json").exists()

    x = np.ones((2, 4), np.float32)
    np.save(tmp_path / "x.npy", x)
    ran = tvm_fuse_cmd("run", str(tmp_path / "tiny.so"), "--input", f"x={tmp_path / 'x.npy'}",
                       "--output-dir", str(tmp_path / "out"))
    assert ran.returncode == 0, ran.stderr
    w = np.arange(16, dtype=np.float32).reshape(4, 4) / 16
    np.testing.assert_allclose(np.load(tmp_path / "out" / "y.npy"), np.maximum(x @ w, 0), rtol=1e-6)


@pytest.mark.avx512
def test_bench_prints_latency_next_to_onnxruntime(tmp_path):
    model_path = tmp_path / "tiny.onnx"
    onnx.save(tiny_model(batch=2), model_path)
    result = tvm_fuse_cmd("bench", str(model_path), "--target", AVX512_TARGET, "--repeat", "3", "--precision", "fp32")
    assert result.returncode == 0, result.stderr
    assert "tvm_fuse" in result.stdout and "onnxruntime" in result.stdout
    assert "ONNX Runtime / tvm_fuse" in result.stdout and "max abs output difference" in result.stdout


@pytest.mark.avx512
def test_bench_times_every_precision_of_the_target_beside_the_other_runtimes(tmp_path, capsys):
    """By default: fp32 and int8 for an AVX-512 target without AVX512-BF16 (bf16 where it has it),
    each with ONNX Runtime's time and ratio and our output's distance from ONNX Runtime fp32."""
    model_path = tmp_path / "tiny.onnx"
    onnx.save(tiny_model(batch=2), model_path)
    assert cli.main(["bench", str(model_path), "--target", AVX512_TARGET, "--repeat", "2", "--warmup", "1"]) == 0
    out = capsys.readouterr().out
    assert "int8 calibrated on 8 seeded random inputs" in out
    header, *rows = [line for line in out.splitlines() if line.split()[:1] in (["precision"], ["fp32"], ["bf16"],
                                                                               ["int8"])]
    assert "ONNX Runtime ms" in header and "ONNX Runtime / ours" in header and "max rel diff" in header
    assert [row.split()[0] for row in rows] == ["fp32", "int8"]
    fp32_diff = float(rows[0].split()[-1])
    assert fp32_diff < 1e-5


@pytest.mark.parametrize(
    "args, message",
    [
        (["build", "missing.onnx"], "missing.onnx does not exist"),
        (["run", "missing.so"], "no exported model"),
        (["build", "not_a_model"], "unknown model 'not_a_model'"),
        (["build", "resnet50", "--target", "llvm -mcpu=nonsense"], "does not know the CPU"),
        (["build", "resnet50", "--int8"], "--int8 needs --calib PATH"),
        (["build", "resnet50", "--int8", "--calib", "nowhere"], "neither a folder nor a .npy / .npz file"),
    ],
)
def test_errors_are_one_line_not_a_traceback(args, message, tmp_path):
    result = tvm_fuse_cmd(*args, cwd=tmp_path)
    assert result.returncode == 2
    assert message in result.stderr
    assert "Traceback" not in result.stderr


def test_no_winograd_keeps_every_conv_direct(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv(WINOGRAD_SWITCH, "0")  # on; restored after the test, as main() sets it
    weight = numpy_helper.from_array(np.ones((8, 8, 3, 3), np.float32) / 72, "w")
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["y"], name="conv", pads=[1, 1, 1, 1])], "conv3x3",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 28, 28])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 28, 28])], [weight])
    path = tmp_path / "conv.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    names = {}
    for flags in ([], ["--no-winograd"]):
        assert cli.main(["explain", str(path), "--json", *flags]) == 0
        names[bool(flags)] = [k["name"] for k in json.loads(capsys.readouterr().out)["kernels"]]
    assert names == {False: ["winograd4_conv2d"], True: ["conv2d"]}


def test_precision_bf16_reaches_the_build_and_the_report(tmp_path, capsys):
    weight = numpy_helper.from_array(np.ones((32, 16, 1, 1), np.float32) / 16, "w")
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["y"], name="conv")], "conv1x1",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 14, 14])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 32, 14, 14])], [weight])
    path = tmp_path / "conv.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    assert cli.main(["explain", str(path), "--json", "--precision", "bf16", "--target", "llvm -mcpu=znver4"]) == 0
    assert [k["precision"] for k in json.loads(capsys.readouterr().out)["kernels"]] == ["bf16"]
    assert cli.main(["explain", str(path), "--precision", "bf16", "--target", "llvm -mcpu=znver4"]) == 0
    assert "1 of the fused kernels run in bf16" in capsys.readouterr().out


@pytest.mark.vnni
def test_quantize_then_build_int8_from_the_table(tmp_path, capsys):
    from tests.quantization.models import residual_block

    onnx.save(residual_block(), tmp_path / "block.onnx")
    np.save(tmp_path / "samples.npy", np.random.default_rng(0).standard_normal((4, 32, 16, 16)).astype(np.float32))
    table = tmp_path / "block.calib.json"
    assert cli.main(["quantize", str(tmp_path / "block.onnx"), "--calib", str(tmp_path / "samples.npy"),
                     "--calib-method", "minmax", "-o", str(table)]) == 0
    assert "4 tensor scales from 4 batches (minmax)" in capsys.readouterr().out
    assert cli.main(["explain", str(tmp_path / "block.onnx"), "--json", "--int8", "--calib", str(table)]) == 0
    kernels = json.loads(capsys.readouterr().out)["kernels"]
    assert [k["int8"] for k in kernels] == [True, True, True]
    assert cli.main(["bench", str(tmp_path / "block.onnx"), "--int8", "--calib", str(table),
                     "--repeat", "2", "--warmup", "1"]) == 0
    out = capsys.readouterr().out
    assert "tvm_fuse in int8 (3 int8 kernels), ONNX Runtime in fp32 (not in int8: " in out
    assert "--calib is a table" in out and "onnxruntime int8" not in out


def test_bench_int8_times_onnxruntime_in_int8_too(tmp_path, capsys):
    """ONNX Runtime's side runs on any host; tvm_fuse's int8 kernels are checked where they run."""
    from tests.quantization.models import residual_block

    onnx.save(residual_block(), tmp_path / "block.onnx")
    np.save(tmp_path / "samples.npy", np.random.default_rng(0).standard_normal((4, 32, 16, 16)).astype(np.float32))
    assert cli.main(["bench", str(tmp_path / "block.onnx"), "--int8", "--calib", str(tmp_path / "samples.npy"),
                     "--calib-method", "minmax", "--repeat", "2", "--warmup", "1"]) == 0
    out = capsys.readouterr().out
    assert "ONNX Runtime in fp32 and in int8 (static QDQ, u8 activations, s8 per-channel weights" in out
    rows = [line.split()[:2] for line in out.splitlines() if line.startswith(("tvm_fuse ", "onnxruntime "))]
    assert rows == [["tvm_fuse", "int8"], ["onnxruntime", "fp32"], ["onnxruntime", "int8"]]
    assert "ONNX Runtime fp32 / tvm_fuse int8: " in out and "ONNX Runtime int8 / tvm_fuse int8: " in out
    assert "max abs output difference from ONNX Runtime fp32" in out
    if {"avx512f", "avx512bw"} <= host_features():
        assert "tvm_fuse in int8 (3 int8 kernels)" in out


def test_dynamic_int8_needs_no_calibration_and_benches_onnxruntimes_dynamic_int8(tmp_path, capsys):
    """ONNX Runtime's side runs on any host; the int8 kernel count where ours run."""
    from tvm_fuse.benchmarking.models.built import transformer_encoder

    onnx.save(transformer_encoder(batch=1, seq_len=32, hidden=64, layers=1), tmp_path / "encoder.onnx")
    assert cli.main(["bench", str(tmp_path / "encoder.onnx"), "--int8", "--int8-activations", "dynamic",
                     "--repeat", "2", "--warmup", "1"]) == 0
    out = capsys.readouterr().out
    assert "ONNX Runtime in fp32 and in int8 (quantize_dynamic" in out
    rows = [line.split()[:2] for line in out.splitlines() if line.startswith(("tvm_fuse ", "onnxruntime "))]
    assert rows == [["tvm_fuse", "int8"], ["onnxruntime", "fp32"], ["onnxruntime", "int8"]]
    if {"avx512f", "avx512bw"} <= host_features():
        assert "tvm_fuse in int8 (4 int8 kernels)" in out  # Q, K and V packed in one; output; FFN up, down
