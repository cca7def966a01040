"""LeakyReluToMax: a leaky ReLU with a slope in [0, 1] becomes maximum(x, x * slope), which
layout conversion carries through; other slopes stay."""

import numpy as np
import pytest
import tvm
from tvm import relax

from tvm_fuse.transform.leaky_relu_to_max import LeakyReluToMax

from .relax_modules import module, run

PARAMS = {"x": (2, 8)}


def _leaky(alpha):
    return module(PARAMS, lambda bb, x: bb.emit(relax.op.nn.leakyrelu(x, alpha)))


def test_a_leaky_relu_becomes_a_maximum_with_the_same_values():
    def expected(bb, x):
        return bb.emit(relax.op.maximum(x, relax.op.multiply(x, relax.const(0.1, "float32"))))

    after = LeakyReluToMax()(_leaky(0.1))
    tvm.ir.assert_structural_equal(after, module(PARAMS, expected))
    feed = {"x": np.random.default_rng(0).standard_normal(PARAMS["x"]).astype(np.float32)}
    np.testing.assert_allclose(run(after, feed)[0], np.where(feed["x"] > 0, feed["x"], 0.1 * feed["x"]), rtol=1e-6)


@pytest.mark.parametrize("alpha", [-0.5, 2.0])
def test_a_slope_outside_0_to_1_stays(alpha):
    before = _leaky(alpha)
    tvm.ir.assert_structural_equal(LeakyReluToMax()(before), before)
