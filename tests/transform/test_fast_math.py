"""FastMath: a power by a constant multiple of 1/4 runs as products and square roots (no libm
call per element) and matches ONNX Runtime's powf, zeros, infinities and NaNs included; exp,
tanh, sigmoid and SiLU, alone or after a conv (a fused epilogue), run without libm's expf and
match ONNX Runtime."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import tvm_fuse
from tests.conftest import ort_outputs


def _pow_model(exponent: float):
    graph = helper.make_graph(
        [helper.make_node("Pow", ["x", "e"], ["y"], name="pow")], "pow",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 64])],
        [numpy_helper.from_array(np.array(exponent, np.float32), "e")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    return model


@pytest.mark.parametrize("exponent", [0.75, 0.5, 0.25, 1.5, 2.0, 3.0, -0.5, -0.75, -1.0, -2.0])
def test_a_quarter_power_matches_powf_without_calling_it(exponent):
    x = np.random.default_rng(0).standard_normal((4, 64)).astype(np.float32) * 3
    x[0, :6] = [0.0, -0.0, 1e-30, 1e30, -1.0, np.inf]
    model = tvm_fuse.build(_pow_model(exponent))
    (ours,), (reference,) = model.run(None, {"x": x}), ort_outputs(_pow_model(exponent), {"x": x})
    # the same values, signs of infinities and NaNs where powf has them, within 2 ulp
    np.testing.assert_allclose(ours, reference, rtol=2.5e-7, atol=0)
    assert "powf" not in model.assembly()


def test_another_power_stays_powf():
    x = np.abs(np.random.default_rng(0).standard_normal((4, 64)).astype(np.float32))
    model = tvm_fuse.build(_pow_model(0.3))
    np.testing.assert_allclose(model.run(None, {"x": x})[0], ort_outputs(_pow_model(0.3), {"x": x})[0], rtol=1e-6)
    assert "powf" in model.assembly()


def _activation_model(op: str, after_conv: bool):
    """`op` (Exp, Tanh, Sigmoid or SiLU as exporters write it: x * Sigmoid(x)) of x, or of a
    1x1 conv of x, which fuses it into the conv's epilogue (a 1x1, so that no Winograd rounding,
    which exp magnifies, adds to the approximation's error)."""
    rng = np.random.default_rng(0)
    nodes, initializers, source = [], [], "x"
    if after_conv:
        nodes.append(helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv"))
        initializers = [numpy_helper.from_array((rng.standard_normal((16, 16, 1, 1)) * 0.9).astype(np.float32), "w"),
                        numpy_helper.from_array(rng.standard_normal(16).astype(np.float32), "b")]
        source = "c"
    if op == "SiLU":
        nodes += [helper.make_node("Sigmoid", [source], ["s"], name="sigmoid"),
                  helper.make_node("Mul", [source, "s"], ["y"], name="silu")]
    else:
        nodes.append(helper.make_node(op, [source], ["y"], name=op.lower()))
    graph = helper.make_graph(nodes, "activation", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, 8, 8])], initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    return model


@pytest.mark.parametrize("after_conv", [False, True], ids=["alone", "fused"])
@pytest.mark.parametrize("op", ["Exp", "Tanh", "Sigmoid", "SiLU"])
def test_exp_tanh_sigmoid_and_silu_match_onnxruntime_without_libm(op, after_conv):
    x = np.random.default_rng(1).standard_normal((1, 16, 8, 8)).astype(np.float32) * 4
    x[0, 0, 0, :6] = [0.0, -30.0, 30.0, -87.0, 87.0, -100.0]  # sigmoid's and tanh's saturation, exp's range
    model = tvm_fuse.build(_activation_model(op, after_conv))
    (ours,), (reference,) = model.run(None, {"x": x}), ort_outputs(_activation_model(op, after_conv), {"x": x})
    # within 1e-6 of each value (the approximations err by under 3e-7, ONNX Runtime's own by as much)
    np.testing.assert_allclose(ours, reference, rtol=1e-6, atol=1e-5 if after_conv else 1e-6)
    assert "expf" not in model.assembly() and "tanhf" not in model.assembly()
