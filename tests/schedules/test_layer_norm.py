"""The layer norm schedule: every setting of its knob gives numpy's layer norm."""

from __future__ import annotations

import numpy as np
import pytest
import tvm
from tvm import s_tir, te

from tvm_fuse.compute.layer_norm import layer_norm_rows
from tvm_fuse.pipeline import TIR_PIPELINE
from tvm_fuse.schedules import layer_norm
from tvm_fuse.schedules.common import anchor_block
from tvm_fuse.target import parse_target


@pytest.mark.parametrize("row_tile", [1, 2, 4, 8])
def test_every_row_tile_computes_the_layer_norm(row_tile):
    x, gamma, beta = te.placeholder((16, 48), name="x"), te.placeholder((48,), name="g"), te.placeholder((48,), name="b")
    sch = s_tir.Schedule(te.create_prim_func([x, gamma, beta, layer_norm_rows(x, gamma, beta, 1e-5, 16)]))
    block, _ = anchor_block(sch)
    assert layer_norm.LayerNormKnobs(row_tile) in layer_norm.knob_space(sch, block, 16)
    layer_norm.schedule(sch, block, 16, layer_norm.LayerNormKnobs(row_tile))
    kernel = tvm.compile(tvm.IRModule({"main": sch.mod["main"]}), target=parse_target("llvm"), tir_pipeline=TIR_PIPELINE)
    rng = np.random.default_rng(0)
    data = (rng.standard_normal((16, 48)) * 3 + 5).astype(np.float32)
    g, b = rng.standard_normal(48).astype(np.float32), rng.standard_normal(48).astype(np.float32)
    out = tvm.runtime.tensor(np.zeros((16, 48), np.float32))
    kernel["main"](*map(tvm.runtime.tensor, (data, g, b)), out)
    mean, var = data.mean(-1, keepdims=True), data.var(-1, keepdims=True)
    np.testing.assert_allclose(out.numpy(), (data - mean) / np.sqrt(var + 1e-5) * g + b, rtol=1e-5, atol=1e-5)
