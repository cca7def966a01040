"""Every entry of the fusion table is captured on a minimal graph, as one composite function
named after its chain; graphs the kernels cannot take are left alone."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from tvm import relax

import tvm_fuse
from tests.conftest import assert_close, ort_outputs
from tvm_fuse.ir_names import PATTERN_ATTR
from tvm_fuse.patterns.activations import ACTIVATIONS as TABLE_ACTIVATIONS
from tvm_fuse.patterns.table import FAMILIES
from tvm_fuse.transform.fuse_patterns import FusePatterns

from .chains import ACTIVATIONS, ANCHORS, chain


def composites(mod) -> list[str]:
    """The chains of the composite functions `main` calls, in call order."""
    found = []
    for block in mod["main"].body.blocks:
        for binding in block.bindings:
            value = binding.value
            if isinstance(value, relax.Call) and isinstance(value.op, relax.GlobalVar):
                found.append(str(mod[value.op].attrs[PATTERN_ATTR]))
    return found


def unfused_ops(mod) -> list[str]:
    return [b.value.op.name for block in mod["main"].body.blocks for b in block.bindings
            if isinstance(b.value, relax.Call) and not isinstance(b.value.op, relax.GlobalVar)]


def test_the_fixture_covers_every_activation_of_the_table():
    assert set(ACTIVATIONS) == {a.name for a in TABLE_ACTIVATIONS}


@pytest.mark.parametrize("anchor", ANCHORS)
@pytest.mark.parametrize("steps", [
    [], ["bias"], ["bn"], ["bias", "bn"], ["bias", "relu"], ["bias", "bn", "relu"],
    ["sum"], ["bias", "sum"], ["bias", "relu", "sum"], ["bias", "sum", "relu"],
    ["bias", "bn", "relu", "sum", "relu"], ["relu", "sum", "clip"],
])
def test_each_anchor_takes_every_slot_combination(anchor, steps):
    fused = FusePatterns()(chain(anchor, steps))
    assert composites(fused) == ["+".join([anchor, *steps])]
    assert unfused_ops(fused) == []


@pytest.mark.parametrize("anchor", ["conv2d", "dense"])
@pytest.mark.parametrize("activation", sorted(ACTIVATIONS))
def test_each_activation_is_fused_after_the_bias_and_after_the_sum(anchor, activation):
    fused = FusePatterns()(chain(anchor, ["bias", activation, "sum", activation]))
    assert composites(fused) == [f"{anchor}+bias+{activation}+sum+{activation}"]
    assert unfused_ops(fused) == []


def test_an_intermediate_read_elsewhere_ends_the_chain_before_it():
    # The bias-add's output is also a graph output: the kernel ends at the bias-add, whose
    # result must exist in memory anyway; the relu becomes a second consumer of it.
    fused = FusePatterns()(chain("conv2d", ["bias", "relu"], extra_use=1))
    assert composites(fused) == ["conv2d+bias"]
    assert unfused_ops(fused) == ["relax.nn.relu"]


def test_an_anchor_read_elsewhere_stays_a_kernel_of_its_own():
    fused = FusePatterns()(chain("conv2d", ["bias", "relu"], extra_use=0))
    assert composites(fused) == ["conv2d"]
    assert sorted(unfused_ops(fused)) == ["relax.add", "relax.nn.relu"]


@pytest.mark.parametrize("anchor", ["conv2d", "dense"])
def test_weights_computed_at_run_time_are_left_alone(anchor):
    fused = FusePatterns()(chain(anchor, ["bias", "relu"], constant_weight=False))
    assert composites(fused) == []


def test_a_residual_that_would_grow_the_output_is_not_a_sum_post_op():
    # (2, 8, 6, 6) + the conv's (1, 8, 6, 6) broadcasts to a larger tensor than the kernel writes.
    fused = FusePatterns()(chain("conv2d", ["bias", "sum"], sum_shape=(2, 8, 6, 6)))
    assert composites(fused) == ["conv2d+bias"]
    assert unfused_ops(fused) == ["relax.add"]


def test_a_residual_that_broadcasts_into_the_output_is_fused():
    fused = FusePatterns()(chain("conv2d", ["bias", "sum"], sum_shape=(1, 8, 1, 6)))
    assert composites(fused) == ["conv2d+bias+sum"]


@pytest.mark.parametrize("family, steps, expected, left", [
    ("conv_bias", ["bias", "relu"], "conv2d", ["relax.add", "relax.nn.relu"]),
    ("conv_relu", ["bias", "relu"], "conv2d+bias", ["relax.nn.relu"]),
    ("conv_bn", ["bias", "bn", "relu"], "conv2d+bias", ["relax.multiply", "relax.add", "relax.nn.relu"]),
    ("conv_sum", ["bias", "relu", "sum", "relu"], "conv2d+bias+relu", ["relax.add", "relax.nn.relu"]),
])
def test_a_disabled_family_is_not_fused(family, steps, expected, left):
    fused = FusePatterns({family})(chain("conv2d", steps))
    assert composites(fused) == [expected]
    assert unfused_ops(fused) == left


def test_disabling_every_family_leaves_the_anchors():
    fused = FusePatterns(FAMILIES)(chain("dense", ["bias", "relu", "sum", "relu"]))
    assert composites(fused) == ["dense"]


def test_a_matmul_by_a_constant_vector_is_no_dense_layer():
    """numpy's x @ v for a 1-D constant v: the dense kernel indexed v as a matrix (it raised)."""
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "v"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])],
                              [numpy_helper.from_array(np.arange(4, dtype=np.float32), "v")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    feed = {"x": np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)}
    assert_close(tvm_fuse.build(model, "llvm").run(None, feed), ort_outputs(model, feed))
