"""`fast_math.exp` and `sigmoid` against numpy's in float64 over all of float32's range: within
a few ulp up to the edge of overflow (exp(88.7) is finite), inf, 0 and NaN where numpy gives
them, and vectorized without libm's expf."""

from __future__ import annotations

import numpy as np
import tvm
from tvm import s_tir, te

from tvm_fuse.compute.fast_math import exp, sigmoid
from tvm_fuse.pipeline import TIR_PIPELINE
from tvm_fuse.target import parse_target


def _vectorized(function, x: np.ndarray) -> np.ndarray:
    """`function` of `x`, its stages inlined into one loop of 16-lane vectors, as in a kernel's epilogue."""
    data = te.placeholder(x.shape, "float32", name="x")
    sch = s_tir.Schedule(te.create_prim_func([data, function(data)]))
    *stages, block = sch.get_child_blocks(sch.get_sblock("root"))
    for stage in stages:
        sch.compute_inline(stage)
    _, lanes = sch.split(sch.get_loops(block)[0], [None, 16])
    sch.vectorize(lanes)
    kernel = tvm.compile(sch.mod, target=parse_target("native"), tir_pipeline=TIR_PIPELINE)
    assert "expf" not in kernel.mod.inspect_source("asm")
    out = tvm.runtime.tensor(np.zeros_like(x))
    kernel["main"](tvm.runtime.tensor(x), out)
    return out.numpy()


def test_sigmoid_is_within_3_ulp_and_saturates():
    x = np.concatenate([np.linspace(-100, 100, 200_000), [-np.inf, np.inf, -1e30, 1e30]]).astype(np.float32)
    with np.errstate(over="ignore"):
        reference = 1.0 / (1.0 + np.exp(-x.astype(np.float64)))
    np.testing.assert_allclose(_vectorized(sigmoid, x), reference, rtol=3.6e-7, atol=1e-37)


def test_exp_is_within_2_ulp_up_to_overflow():
    """Near float32's largest value too: TVM's fast_exp gave inf for x in [88.38, 88.72]."""
    edge = np.float32(np.log(np.finfo(np.float32).max))
    x = np.concatenate([np.linspace(-87.6, 88.72, 400_000, dtype=np.float32),
                        np.nextafter(edge, np.float32(0)) - np.arange(64, dtype=np.float32) * np.float32(1e-3)])
    np.testing.assert_allclose(_vectorized(exp, x), np.exp(x.astype(np.float64)), rtol=2.4e-7, atol=0)


def test_exp_overflows_underflows_and_keeps_nan_as_numpy():
    x = np.float32([88.73, 100, np.inf, -88, -104, -np.inf, np.nan, 0])
    with np.errstate(over="ignore"):
        reference = np.exp(x)
    got = _vectorized(exp, x)
    np.testing.assert_array_equal(got[[0, 1, 2, 4, 5, 6, 7]], reference[[0, 1, 2, 4, 5, 6, 7]])
    assert 0 <= got[3] <= 1.2e-38  # subnormal there: 0 or near it


def test_exp_of_nonpositive_inputs_is_as_exact():
    """The cheaper form a softmax's shifted scores take; -inf (a masked score) gives 0."""
    x = np.concatenate([np.linspace(-87.6, 0, 200_000, dtype=np.float32), np.float32([-np.inf, -1e30])])
    got = _vectorized(lambda data: exp(data, nonpositive=True), x)
    np.testing.assert_allclose(got[:-2], np.exp(x[:-2].astype(np.float64)), rtol=2.4e-7, atol=0)
    np.testing.assert_array_equal(got[-2:], [0, 0])
