"""CanonicalizeDense: Gemm and MatMul + Add become `matmul(x, W[K, N])` then `add(y, b[N])`."""

import numpy as np
import pytest
import tvm
from onnx import TensorProto, helper, numpy_helper
from tvm import relax

from tests.conftest import assert_close, ort_outputs, random_inputs
from tvm_fuse.frontend.importer import import_onnx
from tvm_fuse.transform.dense import CanonicalizeDense

from .relax_modules import assert_every_binding_tagged, binding_names, module, run

W = np.arange(12, dtype="float32").reshape(3, 4) / 4
B = np.array([1.0, -2.0, 0.5, 4.0], "float32")


def _dense(bb, x, weight=W, bias=B, name="n0x1"):
    """The canonical form: matmul by (K, N), then the bias on the right."""
    y = bb.emit(relax.op.matmul(x, relax.const(weight)), "n0x")
    return bb.emit(relax.op.add(y, relax.const(bias)), name)


def test_gemm_alpha_moves_into_the_weight():
    """What FoldConstant leaves of Gemm(alpha=0.5, beta, transB=1): the alpha on the activation."""

    def before(bb, x):
        scaled = bb.emit(relax.op.multiply(x, relax.const(0.5, "float32")), "n0x")
        y = bb.emit(relax.op.matmul(scaled, relax.const(W)), "n0x2")
        return bb.emit(relax.op.add(y, relax.const(B)), "n0x4")

    def expected(bb, x):
        y = bb.emit(relax.op.matmul(x, relax.const(W * 0.5)), "n0x2")
        return bb.emit(relax.op.add(y, relax.const(B)), "n0x4")

    after = CanonicalizeDense()(module({"x": (2, 3)}, before))
    tvm.ir.assert_structural_equal(after, module({"x": (2, 3)}, expected))
    assert binding_names(after) == ["n0x2", "n0x4", "gv"]


@pytest.mark.parametrize(
    "x_shape, bias, bias_first",
    [
        ((2, 3), B.reshape(1, 4), False),  # Gemm's C of shape (1, N)
        ((2, 3), np.array(3.0, "float32"), False),  # one value for every column
        ((2, 5, 3), B, True),  # MatMul + Add(b, y) on a 3-D input, as torch exports nn.Linear
        ((2, 5, 3), B.reshape(1, 1, 4), True),
    ],
    ids=["row", "scalar", "bias_first", "bias_first_3d_row"],
)
def test_per_column_biases_become_n_on_the_right(x_shape, bias, bias_first):
    def before(bb, x):
        y = bb.emit(relax.op.matmul(x, relax.const(W)), "n0x")
        operands = (relax.const(bias), y) if bias_first else (y, relax.const(bias))
        return bb.emit(relax.op.add(*operands), "n0x1")

    expected = module({"x": x_shape}, lambda bb, x: _dense(bb, x, bias=np.broadcast_to(bias.reshape(-1), (4,)).copy()))
    tvm.ir.assert_structural_equal(CanonicalizeDense()(module({"x": x_shape}, before)), expected)


def test_full_bias_keeps_its_shape_but_goes_right():
    full = np.arange(8, dtype="float32").reshape(2, 4)

    def before(bb, x):
        y = bb.emit(relax.op.matmul(x, relax.const(W)), "n0x")
        return bb.emit(relax.op.add(relax.const(full), y), "n0x1")

    expected = module({"x": (2, 3)}, lambda bb, x: _dense(bb, x, bias=full))
    tvm.ir.assert_structural_equal(CanonicalizeDense()(module({"x": (2, 3)}, before)), expected)


@pytest.mark.parametrize(
    "build",
    [
        lambda bb, x, w: _dense(bb, x),  # already canonical
        lambda bb, x, w: bb.emit(relax.op.add(bb.emit(relax.op.matmul(x, w), "n0x"), relax.const(B)), "n0x1"),
        lambda bb, x, w: _dense(bb, x, bias=np.ones((2, 1), "float32")),  # a per-row bias
        lambda bb, x, w: _dense(bb, x, bias=np.ones((3, 1, 4), "float32")),  # broadcasts y to a larger shape
        lambda bb, x, w: _dense(  # a scale per input column is not an alpha
            bb, bb.emit(relax.op.multiply(x, relax.const(np.full(3, 2.0, "float32"))), "n0x")
        ),
        lambda bb, x, w: _dense(  # a Mul node of its own (the 0.5 that ends a GELU) is not the Gemm's
            bb, bb.emit(relax.op.multiply(x, relax.const(0.5, "float32")), "n5x")
        ),
        lambda bb, x, w: bb.emit(relax.op.add(relax.const(B[:3]), bb.emit(relax.op.add(x, x), "n0x")), "n0x1"),
    ],
    ids=["canonical", "input_weight", "per_row_bias", "broadcasting_bias", "vector_scale", "other_nodes_mul",
         "not_a_matmul"],
)
def test_other_forms_are_left_alone(build):
    before = module({"x": (2, 3), "w": (3, 4)}, build)
    tvm.ir.assert_structural_equal(CanonicalizeDense()(before), before)


def test_switched_off_by_name():
    before = module({"x": (2, 5, 3)}, lambda bb, x: _dense(bb, x, bias=B.reshape(1, 4)))
    with tvm.transform.PassContext(disabled_pass=["tvm_fuse.CanonicalizeDense"]):
        tvm.ir.assert_structural_equal(tvm.transform.Sequential([CanonicalizeDense()])(before), before)


def _onnx_model(node, x_shape, weights):
    graph = helper.make_graph(
        node if isinstance(node, list) else [node],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(value.astype(np.float32), name) for name, value in weights.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    return model


RNG = np.random.default_rng(0)
MODELS = {  # name -> (ONNX nodes, x shape, weights, bias shape after the pass)
    "gemm_transB_alpha_beta": (
        helper.make_node("Gemm", ["x", "w", "c"], ["y"], transB=1, alpha=0.5, beta=2.0),
        [2, 3], {"w": RNG.standard_normal((4, 3)), "c": RNG.standard_normal(4)}, (4,),
    ),
    "gemm_row_bias": (
        helper.make_node("Gemm", ["x", "w", "c"], ["y"], alpha=1.5),
        [2, 3], {"w": RNG.standard_normal((3, 4)), "c": RNG.standard_normal((1, 4))}, (4,),
    ),
    "gemm_full_bias": (
        helper.make_node("Gemm", ["x", "w", "c"], ["y"], transB=1, beta=0.5),
        [2, 3], {"w": RNG.standard_normal((4, 3)), "c": RNG.standard_normal((2, 4))}, (2, 4),
    ),
    "matmul_add_3d": (
        [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Add", ["b", "h"], ["y"])],
        [2, 5, 3], {"w": RNG.standard_normal((3, 4)), "b": RNG.standard_normal(4)}, (4,),
    ),
}


@pytest.mark.parametrize("name", MODELS)
def test_imported_dense_layers_reach_the_form_and_match_onnx_runtime(name):
    nodes, x_shape, weights, bias_shape = MODELS[name]
    model = _onnx_model(nodes, x_shape, weights)
    before = relax.transform.FoldConstant()(import_onnx(model))
    after = CanonicalizeDense()(before)

    main = after["main"]
    matmul, add, _ = main.body.blocks[0].bindings
    assert matmul.value.op.name == "relax.matmul" and matmul.value.args[0].same_as(main.params[0])
    assert [int(d) for d in matmul.value.args[1].ty.shape] == [3, 4]
    assert add.value.op.name == "relax.add" and add.value.args[0].same_as(matmul.var)
    assert tuple(int(d) for d in add.value.args[1].ty.shape) == bias_shape
    assert_every_binding_tagged(after)

    feed = random_inputs({"x": tuple(x_shape)})
    reference = ort_outputs(model, feed)
    assert_close(run(before, feed), reference)
    assert_close(run(after, feed), reference)
