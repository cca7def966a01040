"""FastMath: a power by a constant multiple of 1/4 runs as products and square roots (no libm
call per element) and matches ONNX Runtime's powf, zeros, infinities and NaNs included."""

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
