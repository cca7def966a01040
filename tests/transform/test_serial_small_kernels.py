"""SerialSmallKernels: a kernel with little work runs its parallel loop on the calling thread
(no thread-pool launch in its code), a larger one or one of a run-time size keeps it, and the
outputs are ONNX Runtime's either way."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import tvm_fuse
from tests.conftest import assert_close, ort_outputs

LAUNCH = "TVMBackendParallelLaunch"


def _dense_sigmoid(rows, inner: int, columns: int):
    """sigmoid(x @ W): a dense kernel of rows x inner x columns multiply-adds, and its epilogue."""
    weight = (np.random.default_rng(0).standard_normal((inner, columns)) / np.sqrt(inner)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["m"], name="dense"), helper.make_node("Sigmoid", ["m"], ["y"], name="gate")],
        "dense_sigmoid", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [rows, inner])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [rows, columns])], [numpy_helper.from_array(weight, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    return model


@pytest.mark.parametrize(("rows", "inner", "columns", "parallel"), [
    (1, 64, 128, False),  # an LSTM step's 8K multiply-adds
    (128, 384, 1536, True),  # a transformer's FFN: 75M
    ("batch", 64, 128, True),  # rows known at run time only
])
def test_only_small_kernels_run_serially(rows, inner, columns, parallel):
    model = tvm_fuse.build(_dense_sigmoid(rows, inner, columns))
    assert (LAUNCH in model.assembly()) == parallel
    x = np.random.default_rng(1).standard_normal((rows if isinstance(rows, int) else 3, inner)).astype(np.float32)
    assert_close(model.run(None, {"x": x}), ort_outputs(_dense_sigmoid(rows, inner, columns), {"x": x}), rtol=1e-5)
