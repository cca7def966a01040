"""FoldBatchNorm: into the conv/matmul before it when that feeds nothing else, else scale and shift."""

import numpy as np
import pytest
import tvm
from onnx import TensorProto, helper, numpy_helper
from tvm import relax

from tests.conftest import assert_close, ort_outputs, random_inputs
from tvm_fuse import provenance
from tvm_fuse.frontend.importer import import_onnx
from tvm_fuse.transform.fold_batch_norm import FoldBatchNorm

from .relax_modules import assert_every_binding_tagged, binding_names, module, run

# Batch-norm statistics whose folded forms are exact in float32 (epsilon 0):
# scale = gamma / sqrt(var) = [1, 6], shift = beta - mean * scale = [-0.5, 13].
GAMMA, BETA, MEAN, VAR = [2.0, 3.0], [0.5, 1.0], [1.0, -2.0], [4.0, 0.25]
SCALE, SHIFT = np.array([1.0, 6.0], "float32"), np.array([-0.5, 13.0], "float32")


def _const(values) -> relax.Expr:
    return relax.const(np.array(values, "float32"))


def _batch_norm(bb, x, training=False, gamma=None):
    """The importer's batch-norm on the channel axis: node 1, a tuple and its item [0]."""
    gamma = _const(GAMMA) if gamma is None else gamma
    call = relax.op.nn.batch_norm(x, gamma, _const(BETA), _const(MEAN), _const(VAR), 1, 0.0, training=training)
    return bb.emit(relax.TupleGetItem(bb.emit(call, "n1x"), 0), "n1x1")


def _rewritten(params: dict, before, expected) -> tvm.IRModule:
    """FoldBatchNorm's result on `before`, checked against `expected` (both `_module` builders)."""
    after = FoldBatchNorm()(module(params, before))
    tvm.ir.assert_structural_equal(after, module(params, expected))
    return after


def _conv(x, weight, op=relax.op.nn.conv2d, **attrs):
    return op(x, relax.const(weight), **attrs)


WEIGHT_2D = np.arange(2 * 3 * 3 * 3, dtype="float32").reshape(2, 3, 3, 3) / 4
CONVS = {  # name -> (input shape, weight, conv op, attrs, bias shape)
    "conv2d": ((1, 3, 5, 5), WEIGHT_2D, relax.op.nn.conv2d, {}, (1, 2, 1, 1)),
    "depthwise": ((1, 2, 5, 5), WEIGHT_2D[:, :1], relax.op.nn.conv2d, {"groups": 2}, (1, 2, 1, 1)),
    "conv1d": ((1, 3, 5), WEIGHT_2D[:, :, 0], relax.op.nn.conv1d, {}, (1, 2, 1)),
}


@pytest.mark.parametrize("kind", CONVS)
def test_conv_bias_batch_norm_folds_into_the_conv(kind):
    shape, weight, op, attrs, bias_shape = CONVS[kind]
    bias = np.array([0.25, -1.0], "float32").reshape(bias_shape)

    def before(bb, x):
        conv = bb.emit(_conv(x, weight, op, **attrs), "n0x")
        return _batch_norm(bb, bb.emit(relax.op.add(conv, relax.const(bias)), "n0x1"))

    def expected(bb, x):
        folded = weight * SCALE.reshape((2,) + (1,) * (weight.ndim - 1))
        conv = bb.emit(_conv(x, folded, op, **attrs), "n0x")
        new_bias = bias.reshape(-1) * SCALE + SHIFT  # [-0.25, 7]
        return bb.emit(relax.op.add(conv, relax.const(new_bias.reshape(bias_shape))), "n1x1")

    after = _rewritten({"x": shape}, before, expected)
    assert binding_names(after) == ["n0x", "n1x1", "gv"]  # the conv's node and the batch-norm's both remain


def test_conv_without_bias_gets_the_shift_as_bias():
    def before(bb, x):
        return _batch_norm(bb, bb.emit(_conv(x, WEIGHT_2D), "n0x"))

    def expected(bb, x):
        conv = bb.emit(_conv(x, WEIGHT_2D * SCALE.reshape(2, 1, 1, 1)), "n0x")
        return bb.emit(relax.op.add(conv, relax.const(SHIFT.reshape(1, 2, 1, 1))), "n1x1")

    _rewritten({"x": (1, 3, 5, 5)}, before, expected)


def test_matmul_batch_norm_scales_the_weight_columns():
    weight = np.arange(6, dtype="float32").reshape(3, 2)

    def before(bb, x):
        dense = bb.emit(relax.op.matmul(x, relax.const(weight)), "n0x")
        return _batch_norm(bb, bb.emit(relax.op.add(dense, _const([1.0, 2.0])), "n0x1"))

    def expected(bb, x):
        dense = bb.emit(relax.op.matmul(x, relax.const(weight * SCALE)), "n0x")
        return bb.emit(relax.op.add(dense, relax.const(np.array([1.0, 2.0], "float32") * SCALE + SHIFT)), "n1x1")

    _rewritten({"x": (4, 3)}, before, expected)


def _scale_shift(bb, x):
    ndim = x.ty.ndim
    shape = (1, 2) + (1,) * (ndim - 2) if ndim > 2 else (2,)
    scaled = bb.emit(relax.op.multiply(x, relax.const(SCALE.reshape(shape))), "n1x")
    return bb.emit(relax.op.add(scaled, relax.const(SHIFT.reshape(shape))), "n1x1")


def test_batch_norm_alone_becomes_scale_and_shift():
    after = _rewritten({"x": (1, 2, 4, 4)}, _batch_norm, _scale_shift)
    assert [provenance.node_index(b.var) for b in after["main"].body.blocks[0].bindings[:2]] == [1, 1]


def test_conv_read_twice_keeps_its_weight():
    def before(bb, x):
        conv = bb.emit(_conv(x, WEIGHT_2D), "n0x")
        relu = bb.emit(relax.op.nn.relu(conv), "n2x")
        return relax.Tuple([_batch_norm(bb, conv), relu])

    def expected(bb, x):
        conv = bb.emit(_conv(x, WEIGHT_2D), "n0x")
        relu = bb.emit(relax.op.nn.relu(conv), "n2x")
        return relax.Tuple([_scale_shift(bb, conv), relu])

    _rewritten({"x": (1, 3, 5, 5)}, before, expected)


@pytest.mark.parametrize(
    "layer",
    [
        lambda bb, x, w: bb.emit(relax.op.nn.conv2d(x, w), "n0x"),  # a weight that is an input
        lambda bb, x, w: bb.emit(  # a bias that varies over space, not per channel
            relax.op.add(bb.emit(_conv(x, WEIGHT_2D), "n0x"), _const(np.ones((1, 2, 3, 3)))), "n0x1"
        ),
    ],
    ids=["input_weight", "spatial_bias"],
)
def test_layers_that_cannot_take_the_scale_get_scale_and_shift(layer):
    _rewritten(
        {"x": (1, 3, 5, 5), "w": (2, 3, 3, 3)},
        lambda bb, x, w: _batch_norm(bb, layer(bb, x, w)),
        lambda bb, x, w: _scale_shift(bb, layer(bb, x, w)),
    )


@pytest.mark.parametrize(
    "build",
    [
        lambda bb, x, g: _batch_norm(bb, x, training=True),
        lambda bb, x, g: _batch_norm(bb, x, gamma=g),  # statistics that are inputs
    ],
    ids=["training", "input_gamma"],
)
def test_batch_norms_that_are_not_constant_inference_are_left_alone(build):
    before = module({"x": (1, 2, 4, 4), "g": (2,)}, build)
    tvm.ir.assert_structural_equal(FoldBatchNorm()(before), before)


def test_switched_off_by_name():
    before = module({"x": (1, 2, 4, 4)}, _batch_norm)
    with tvm.transform.PassContext(disabled_pass=["tvm_fuse.FoldBatchNorm"]):
        tvm.ir.assert_structural_equal(tvm.transform.Sequential([FoldBatchNorm()])(before), before)


def test_running_statistics_become_the_constants():
    def before(bb, x):
        bn = bb.emit(relax.op.nn.batch_norm(x, *map(_const, (GAMMA, BETA, MEAN, VAR)), 1, 0.0, training=False), "n1x")
        return relax.Tuple([bb.emit(relax.TupleGetItem(bn, i), "n1x") for i in range(3)])

    def expected(bb, x):
        return relax.Tuple([_scale_shift(bb, x), bb.emit(_const(MEAN), "n1x"), bb.emit(_const(VAR), "n1x")])

    _rewritten({"x": (1, 2, 4, 4)}, before, expected)


def _onnx_model(nodes, inputs, outputs, weights):
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info(name, TensorProto.FLOAT, shape) for name, shape in inputs.items()],
        [helper.make_tensor_value_info(name, TensorProto.FLOAT, None) for name in outputs],
        [numpy_helper.from_array(value.astype(np.float32), name) for name, value in weights.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    return model


def _bn_weights(prefix, channels, rng):
    return {
        f"{prefix}_gamma": rng.standard_normal(channels),
        f"{prefix}_beta": rng.standard_normal(channels),
        f"{prefix}_mean": rng.standard_normal(channels),
        f"{prefix}_var": rng.random(channels) + 0.5,
    }


def _bn_node(x, prefix, y):
    inputs = [x] + [f"{prefix}_{p}" for p in ("gamma", "beta", "mean", "var")]
    return helper.make_node("BatchNormalization", inputs, [y], epsilon=1e-3)


def test_matches_onnx_runtime_and_leaves_no_batch_norm():
    """conv+bias+bn and depthwise conv+bn fold; a conv read twice keeps its bn as scale and shift."""
    rng = np.random.default_rng(0)
    weights = {
        "w0": rng.standard_normal((4, 3, 3, 3)), "b0": rng.standard_normal(4),
        "w1": rng.standard_normal((4, 1, 3, 3)), "w2": rng.standard_normal((4, 4, 1, 1)),
        **_bn_weights("bn0", 4, rng), **_bn_weights("bn1", 4, rng), **_bn_weights("bn2", 4, rng),
    }
    model = _onnx_model(
        [
            helper.make_node("Conv", ["x", "w0", "b0"], ["c0"], pads=[1, 1, 1, 1]),
            _bn_node("c0", "bn0", "y0"),
            helper.make_node("Conv", ["y0", "w1"], ["c1"], group=4, pads=[1, 1, 1, 1]),
            _bn_node("c1", "bn1", "y1"),
            helper.make_node("Conv", ["y1", "w2"], ["c2"]),
            _bn_node("c2", "bn2", "y2"),
            helper.make_node("Add", ["y2", "c2"], ["out"]),
        ],
        {"x": [1, 3, 8, 8]},
        ["out"],
        weights,
    )
    feed = random_inputs({"x": (1, 3, 8, 8)})
    before = relax.transform.FoldConstant()(import_onnx(model))
    after = FoldBatchNorm()(before)

    reference = ort_outputs(model, feed)
    assert_close(run(before, feed), reference)
    assert_close(run(after, feed), reference)
    assert_every_binding_tagged(after)
    ops = [b.value.op.name for b in after["main"].body.blocks[0].bindings if isinstance(b.value, relax.Call)]
    assert ops.count("relax.nn.conv2d") == 3 and ops.count("relax.multiply") == 1
    assert "relax.nn.batch_norm" not in ops
    tvm.ir.assert_structural_equal(relax.transform.DecomposeOpsForInference()(after), after)


@pytest.mark.parametrize("constant_first", [False, True])
def test_a_scale_and_shift_written_out_folds_into_the_conv(constant_first):
    """conv + bias, then `x * s + t` by constants (one value or one per channel): an exporter's
    own batch-norm, or PP-LCNetV3's learnable affine, is the conv's weights and bias."""
    bias = np.array([0.25, -1.0], "float32").reshape(1, 2, 1, 1)
    scale, shift = np.array([1.5], "float32"), SHIFT.reshape(1, 2, 1, 1)

    def before(bb, x):
        conv = bb.emit(relax.op.add(bb.emit(_conv(x, WEIGHT_2D), "n0x"), relax.const(bias)), "n0x1")
        operands = (relax.const(scale), conv) if constant_first else (conv, relax.const(scale))
        return bb.emit(relax.op.add(bb.emit(relax.op.multiply(*operands), "n1x"), relax.const(shift)), "n2x")

    def expected(bb, x):
        conv = bb.emit(_conv(x, WEIGHT_2D * 1.5), "n0x")
        return bb.emit(relax.op.add(conv, relax.const((bias.reshape(-1) * 1.5 + SHIFT).reshape(1, 2, 1, 1))), "n2x")

    _rewritten({"x": (1, 3, 5, 5)}, before, expected)


def test_a_batch_norm_written_with_its_mean_folds_into_the_conv():
    """conv + bias, then `(x - mean) * s + t` by constants per channel (TensorFlow's batch norm,
    once `CancelTransposes` has brought it back to the conv): the conv's weights and bias."""
    bias, mean = np.array([0.25, -1.0], "float32"), np.array([0.5, 2.0], "float32")
    scale = np.array([1.5, -0.5], "float32")

    def before(bb, x):
        conv = bb.emit(relax.op.add(bb.emit(_conv(x, WEIGHT_2D), "n0x"), relax.const(bias.reshape(1, 2, 1, 1))), "n0x1")
        centered = bb.emit(relax.op.subtract(conv, relax.const(mean.reshape(1, 2, 1, 1))), "n1x")
        scaled = bb.emit(relax.op.multiply(centered, relax.const(scale.reshape(1, 2, 1, 1))), "n2x")
        return bb.emit(relax.op.add(scaled, relax.const(SHIFT.reshape(1, 2, 1, 1))), "n3x")

    def expected(bb, x):
        conv = bb.emit(_conv(x, WEIGHT_2D * scale.reshape(2, 1, 1, 1)), "n0x")
        return bb.emit(relax.op.add(conv, relax.const(((bias - mean) * scale + SHIFT).reshape(1, 2, 1, 1))), "n3x")

    _rewritten({"x": (1, 3, 5, 5)}, before, expected)


def test_a_scale_of_a_conv_read_twice_is_left_alone():
    def before(bb, x):
        conv = bb.emit(_conv(x, WEIGHT_2D), "n0x")
        scaled = bb.emit(relax.op.add(bb.emit(relax.op.multiply(conv, _const([2.0])), "n1x"), _const([1.0])), "n2x")
        return bb.emit(relax.op.add(scaled, conv), "n3x")

    _rewritten({"x": (1, 3, 5, 5)}, before, before)
