"""ONNX STFT of real signals (`frontend.spectral`) against ONNX Runtime's FFT: windows given,
implied by the frame length, or none; one- and two-sided; signals as [batch, samples, 1] and as
the [batch, samples] ONNX Runtime also takes."""

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import tvm_fuse
from tests.conftest import assert_close, ort_outputs
from tvm_fuse.errors import CompileError, UnsupportedOpsError


def _stft_model(samples, frame, hop, onesided=1, window=True, length=False, rank=3, signal_length=None):
    inputs = ["x", "step", "window" if window else "", "length" if length else ""]
    while not inputs[-1]:
        inputs.pop()
    weights = [numpy_helper.from_array(np.array(hop, np.int64), "step")]
    if window:
        weights.append(numpy_helper.from_array(np.hanning(frame).astype(np.float32), "window"))
    if length:
        weights.append(numpy_helper.from_array(np.array(frame, np.int64), "length"))
    dims = [2, signal_length or samples, 1][:rank]
    graph = helper.make_graph([helper.make_node("STFT", inputs, ["y"], name="stft", onesided=onesided)], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, dims)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None] * 4)], weights)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("samples,frame,hop,options", [
    (1000, 400, 160, {}),                            # whisper's frames
    (1000, 64, 16, {"onesided": 0}),
    (512, 32, 7, {"window": False, "length": True}),  # a rectangular window
    (100, 100, 1, {"rank": 2}),                       # one frame, a [batch, samples] signal
])
def test_stft_matches_onnx_runtime(samples, frame, hop, options):
    model = _stft_model(samples, frame, hop, **options)
    rank = options.get("rank", 3)
    feed = {"x": np.random.default_rng(0).uniform(-1, 1, (2, samples, 1)[:rank]).astype(np.float32)}
    assert_close(tvm_fuse.build(model).run(None, feed), ort_outputs(model, feed), rtol=1e-4)


def test_a_signal_of_symbolic_length_is_refused_by_name():
    with pytest.raises(CompileError, match=r"'stft'.*signal's length known at build time"):
        tvm_fuse.build(_stft_model(1000, 400, 160, signal_length="samples"))


def test_a_window_computed_at_run_time_is_refused():
    model = _stft_model(1000, 400, 160)
    model.graph.initializer.pop()  # the window becomes an input
    model.graph.input.append(helper.make_tensor_value_info("window", TensorProto.FLOAT, [400]))
    with pytest.raises(UnsupportedOpsError, match="STFT"):
        tvm_fuse.build(model)
