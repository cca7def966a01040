"""ApplySchedules: a kernel takes the best record of its own workload, else that of the same
workload on one image, so a batched or dynamic-batch build runs the knobs tuned at batch 1."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import tvm_fuse
from tests.conftest import assert_close, ort_outputs
from tvm_fuse.frontend import relax_module
from tvm_fuse.schedules import knob_space
from tvm_fuse.target import isa_class, parse_target, target_cpu, vector_lanes
from tvm_fuse.tuner.tasks import extract_tasks
from tvm_fuse.tuning import records
from tvm_fuse.tuning.records import Record


def _conv_model(batch: int | str):
    weight = numpy_helper.from_array(np.random.default_rng(0).standard_normal((32, 16, 3, 3)).astype(np.float32) / 12,
                                     "w")
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
         helper.make_node("Relu", ["c"], ["y"], name="relu")], "conv",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 16, 10, 10])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 32, 10, 10])], [weight])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    return model


@pytest.fixture
def batch_one_log(tmp_path):
    """A log with one record: the batch-1 conv's workload, at a setting other than its default."""
    target = parse_target(None)
    (task,) = extract_tasks(relax_module(_conv_model(1)).mod, target)
    _, other, *_ = knob_space(task.func, vector_lanes(target))
    path = tmp_path / "log.jsonl"
    records.append(path, Record(task.workload, isa_class(target), target_cpu(target), other, 0.01))
    return path


@pytest.mark.parametrize("batch, feed_batch", [(3, 3), ("N", 2)])
def test_a_batched_build_runs_the_knobs_tuned_on_one_image(batch_one_log, batch, feed_batch):
    model = _conv_model(batch)
    built = tvm_fuse.build(model, tuning_logs=batch_one_log)
    assert built.fusion_report()["tuned_kernels"] == 1
    assert tvm_fuse.build(model, tuning_logs=[]).fusion_report()["tuned_kernels"] == 0
    x = {"x": np.random.default_rng(1).standard_normal((feed_batch, 16, 10, 10)).astype(np.float32)}
    assert_close(built.run(None, x), ort_outputs(model, x))
