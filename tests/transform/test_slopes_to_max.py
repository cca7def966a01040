"""SlopesToMax: a leaky ReLU with a slope in [0, 1], or a PRelu with constant slopes in [0, 1],
becomes maximum(x, x * slopes), which layout conversion carries through; other slopes stay."""

import numpy as np
import pytest
import tvm
from tvm import relax

from tvm_fuse.transform.slopes_to_max import SlopesToMax

from .relax_modules import module, run

PARAMS = {"x": (2, 8)}


def _leaky(alpha):
    return module(PARAMS, lambda bb, x: bb.emit(relax.op.nn.leakyrelu(x, alpha)))


def test_a_leaky_relu_becomes_a_maximum_with_the_same_values():
    def expected(bb, x):
        return bb.emit(relax.op.maximum(x, relax.op.multiply(x, relax.const(0.1, "float32"))))

    after = SlopesToMax()(_leaky(0.1))
    tvm.ir.assert_structural_equal(after, module(PARAMS, expected))
    feed = {"x": np.random.default_rng(0).standard_normal(PARAMS["x"]).astype(np.float32)}
    np.testing.assert_allclose(run(after, feed)[0], np.where(feed["x"] > 0, feed["x"], 0.1 * feed["x"]), rtol=1e-6)


@pytest.mark.parametrize("alpha", [-0.5, 2.0])
def test_a_slope_outside_0_to_1_stays(alpha):
    before = _leaky(alpha)
    tvm.ir.assert_structural_equal(SlopesToMax()(before), before)


PRELU_PARAMS = {"x": (2, 3, 4, 5)}


def _prelu(slopes, axis=1):
    return module(PRELU_PARAMS, lambda bb, x: bb.emit(relax.op.nn.prelu(x, relax.const(slopes), axis)))


@pytest.mark.parametrize("axis", [1, 3])
def test_a_prelu_with_slopes_in_0_to_1_becomes_a_maximum_with_the_same_values(axis):
    slopes = np.linspace(0, 1, PRELU_PARAMS["x"][axis]).astype(np.float32)
    after = SlopesToMax()(_prelu(slopes, axis))
    assert "prelu" not in after.script() and "maximum" in after.script()
    x = np.random.default_rng(0).standard_normal(PRELU_PARAMS["x"]).astype(np.float32)
    shape = [1] * x.ndim
    shape[axis] = -1
    np.testing.assert_allclose(run(after, {"x": x})[0], np.where(x > 0, x, slopes.reshape(shape) * x), rtol=1e-6)


@pytest.mark.parametrize("slopes", [[0.1, -0.2, 0.3], [0.5, 1.5, 0.1]])
def test_a_prelu_with_any_slope_outside_0_to_1_stays(slopes):
    before = _prelu(np.array(slopes, np.float32))
    tvm.ir.assert_structural_equal(SlopesToMax()(before), before)
