"""DataflowAroundIfs: the ops of a graph with an If run fused, as in a graph without one."""

import numpy as np
import tvm_ffi

import tvm_fuse
from tests.conftest import ort_outputs, tiny_model
from tests.transform.realize.test_scope import _feed, _model
from tvm_fuse.frontend import relax_module
from tvm_fuse.transform.dataflow_around_ifs import DataflowAroundIfs


def test_the_ops_before_an_if_are_fused_and_the_model_matches_onnxruntime():
    model = _model()  # conv + relu in main, then an If whose branches read it
    built = tvm_fuse.build(model)
    report = built.fusion_report()
    assert "m_conv" in {node for kernel in report["kernels"] for node in kernel["onnx_nodes"]}
    assert [u["onnx_node"] for u in report["unfused"]] == ["pick"]
    for cond in (True, False):
        (ours,), (reference,) = built.run(None, _feed(3, cond)), ort_outputs(model, _feed(3, cond))
        np.testing.assert_allclose(ours, reference, rtol=1e-4, atol=1e-4 * np.abs(reference).max())


def test_a_graph_in_dataflow_blocks_is_left_as_it_is():
    mod = relax_module(tiny_model()).mod
    assert tvm_ffi.structural_equal(DataflowAroundIfs()(mod), mod)
