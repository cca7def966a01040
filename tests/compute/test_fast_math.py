"""`fast_math.sigmoid` against numpy's in float64 over all of float32's useful range: within
3 ulp, saturating to 0 and 1, and vectorized without libm's expf."""

from __future__ import annotations

import numpy as np
import tvm
from tvm import s_tir, te

from tvm_fuse.compute.fast_math import sigmoid
from tvm_fuse.pipeline import TIR_PIPELINE
from tvm_fuse.target import parse_target


def test_sigmoid_is_within_3_ulp_and_saturates():
    x = np.concatenate([np.linspace(-100, 100, 200_000), [-np.inf, np.inf, -1e30, 1e30]]).astype(np.float32)
    data = te.placeholder(x.shape, "float32", name="x")
    sch = s_tir.Schedule(te.create_prim_func([data, sigmoid(data)]))
    *stages, block = sch.get_child_blocks(sch.get_sblock("root"))
    for stage in stages:
        sch.compute_inline(stage)
    _, lanes = sch.split(sch.get_loops(block)[0], [None, 16])
    sch.vectorize(lanes)
    kernel = tvm.compile(sch.mod, target=parse_target("native"), tir_pipeline=TIR_PIPELINE)
    out = tvm.runtime.tensor(np.zeros_like(x))
    kernel["main"](tvm.runtime.tensor(x), out)
    with np.errstate(over="ignore"):
        reference = 1.0 / (1.0 + np.exp(-x.astype(np.float64)))
    np.testing.assert_allclose(out.numpy(), reference, rtol=3.6e-7, atol=1e-37)
    assert "expf" not in kernel.mod.inspect_source("asm")
