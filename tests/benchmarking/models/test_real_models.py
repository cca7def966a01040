"""Real trained models from PyPI wheels (`tvm_fuse.benchmarking.models.real`; the test extra installs them):
PP-OCRv4 text detection and recognition and PP-OCR's direction classifier (rapidocr-onnxruntime),
and Silero voice-activity detection (silero-vad, LSTM). Each builds for the native target and
matches ONNX Runtime within 1e-3 of each output's largest magnitude, on inputs in the model's
own range (normalized images, audio in [-1, 1]), at batch 1 and, where the batch is dynamic, 4;
its fusion report accounts for every node."""

import numpy as np
import onnx
import pytest

import tvm_fuse
from tests.conftest import assert_close, ort_outputs
from tvm_fuse.benchmarking.models.real import REAL_MODELS, real_model_feed, real_model_path
from tvm_fuse.frontend.branches import all_nodes
from tvm_fuse.frontend.load import load_model

pytestmark = pytest.mark.slow


def _path(name: str):
    try:
        return real_model_path(name)
    except tvm_fuse.ModelLoadError as missing:
        pytest.skip(str(missing))


@pytest.mark.parametrize("batch", [1, 4])
@pytest.mark.parametrize("name", sorted(REAL_MODELS))
def test_real_model_matches_onnxruntime(name, batch):
    if batch != 1 and REAL_MODELS[name].batch_fixed:
        pytest.skip("the export fixes batch 1")
    path, feed = _path(name), real_model_feed(name, batch)
    compiled = tvm_fuse.build(path, "native", input_shapes={k: v.shape for k, v in feed.items()})
    model = onnx.load(path)
    assert_close(compiled.run(None, feed), ort_outputs(model, feed), rtol=1e-3)
    report = compiled.fusion_report()
    seen = ({n for k in report["kernels"] for n in k["onnx_nodes"]} | {u["onnx_node"] for u in report["unfused"]}
            | {f["onnx_node"] for f in report["folded"]})
    assert {n.name or f"{n.op_type}#{i}" for i, n in enumerate(model.graph.node)} <= seen
    assert all(u["reason"] for u in report["unfused"])


def test_silero_vad_runs_the_branch_of_the_sample_rate_fed():
    """silero_vad.onnx holds a 16 kHz and an 8 kHz model in the branches of an If on its `sr`
    input. Built for 8 kHz chunks, both branches build and each matches ONNX Runtime at its rate;
    built for 16 kHz chunks, the 8 kHz branch cannot be (its shapes do not fit), so taking it is
    an error that names it, and the report says why for each of its nodes."""
    path = _path("silero_vad")
    model = onnx.load(path)
    chunk = real_model_feed("silero_vad")
    for rate, samples in ((16000, 288), (8000, 288)):
        feed = {**chunk, "input": chunk["input"][:, :samples].copy(), "sr": np.array(rate, np.int64)}
        compiled = tvm_fuse.build(path, "native", input_shapes={k: v.shape for k, v in feed.items()})
        assert_close(compiled.run(None, feed), ort_outputs(model, feed), rtol=1e-3)

    feed = {**chunk, "sr": np.array(8000, np.int64)}
    compiled = tvm_fuse.build(path, "native", input_shapes={k: v.shape for k, v in feed.items()})
    with pytest.raises(Exception, match="else_branch of If 'If_0' cannot run on inputs of the shapes"):
        compiled.run(None, feed)
    report = compiled.fusion_report()
    reported = {n: r["reason"] for key in ("unfused", "folded") for r in report[key] for n in [r["onnx_node"]]}
    reported.update((n, "kernel") for k in report["kernels"] for n in k["onnx_nodes"])
    branch = [n.name for n in all_nodes(load_model(path))[len(model.graph.node):]]
    assert set(branch) <= set(reported)
    unbuilt = {n for n, reason in reported.items() if "cannot run on inputs" in reason}
    assert unbuilt and all(n.startswith(("If_0_else_branch", "If_0/else_branch/")) for n in unbuilt)
