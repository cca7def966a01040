"""PackProjections: an attention block's Q, K and V projections (dense layers reading one input,
each split into heads) run as one dense kernel whose report entry names all six nodes, and the
attention kernel reads its output where it was written; the model still equals ONNX Runtime,
also where the attention kernel does not take the block (the slices then computed), and dense
layers of another use are left as they were."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper, numpy_helper

import tvm_fuse
from tests.conftest import assert_close, ort_outputs
from tests.transform.test_fuse_attention import _attention_model, _feed

PROJECTIONS = {"q_matmul", "q_bias", "k_matmul", "k_bias", "v_matmul", "v_bias"}


def _dense_kernels(compiled) -> list[dict]:
    return [k for k in compiled.fusion_report()["kernels"] if k["pattern"].startswith("dense")]


def test_q_k_and_v_run_as_one_dense_kernel_that_attention_reads():
    model = _attention_model("batch", "tokens")
    compiled = tvm_fuse.build(model, "native")
    (dense,) = _dense_kernels(compiled)
    assert set(dense["onnx_nodes"]) == PROJECTIONS
    kernels = [k["pattern"] for k in compiled.fusion_report()["kernels"]]
    assert kernels == ["dense+bias", "attention"]  # no slice between them
    for batch, tokens in ((1, 1), (2, 24)):
        feed = _feed(batch, tokens, seed=tokens)
        assert_close(compiled.run(None, feed), ort_outputs(model, feed), rtol=1e-4)


def test_a_block_attention_does_not_take_reads_the_slices():
    """A softmax over the queries is no attention kernel's: Q, K and V are copied out of the
    packed layer's output for the separate products."""
    model = _attention_model(1, 20, softmax_axis=2)
    compiled = tvm_fuse.build(model, "native")
    (dense,) = _dense_kernels(compiled)
    assert set(dense["onnx_nodes"]) == PROJECTIONS
    feed = _feed(1, 20)
    assert_close(compiled.run(None, feed), ort_outputs(model, feed), rtol=1e-4)


def test_the_attention_family_off_leaves_three_dense_layers():
    compiled = tvm_fuse.build(_attention_model(1, 20), "native", disable_fusion=["attention"])
    assert len(_dense_kernels(compiled)) == 3


def test_dense_layers_of_another_use_stay_apart():
    """Two dense layers reading one input, added: no split into heads, so no packing."""
    rng = np.random.default_rng(0)
    weights = [numpy_helper.from_array(rng.standard_normal((32, 32)).astype(np.float32), f"w{i}") for i in range(2)]
    biases = [numpy_helper.from_array(rng.standard_normal(32).astype(np.float32), f"b{i}") for i in range(2)]
    nodes = [node for i in range(2) for node in (helper.make_node("MatMul", ["x", f"w{i}"], [f"m{i}"]),
                                                 helper.make_node("Add", [f"m{i}", f"b{i}"], [f"y{i}"]))]
    nodes.append(helper.make_node("Add", ["y0", "y1"], ["y"]))
    graph = helper.make_graph(nodes, "siblings", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 32])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 32])], weights + biases)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    compiled = tvm_fuse.build(model, "native")
    assert len(_dense_kernels(compiled)) == 2
    feed = {"x": rng.standard_normal((4, 32)).astype(np.float32)}
    assert_close(compiled.run(None, feed), ort_outputs(model, feed), rtol=1e-4)
