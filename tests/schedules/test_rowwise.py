"""The rowwise schedule: every setting of its knob gives numpy's layer norm and softmax."""

from __future__ import annotations

import re

import numpy as np
import pytest
import tvm
from tvm import s_tir, te

from tests.conftest import AVX512_TARGET
from tvm_fuse.compute.rowwise import layer_norm_rows, softmax_rows
from tvm_fuse.pipeline import TIR_PIPELINE
from tvm_fuse.schedules import rowwise
from tvm_fuse.schedules.common import anchor_block
from tvm_fuse.target import parse_target


def _compiled(inputs, output, row_tile: int, target: str = "llvm"):
    sch = s_tir.Schedule(te.create_prim_func([*inputs, output]))
    block, _ = anchor_block(sch)
    assert rowwise.RowwiseKnobs(row_tile) in rowwise.knob_space(sch, block, 16)
    rowwise.schedule(sch, block, 16, rowwise.RowwiseKnobs(row_tile))
    return tvm.compile(tvm.IRModule({"main": sch.mod["main"]}), target=parse_target(target), tir_pipeline=TIR_PIPELINE)


def _run(inputs, output, row_tile: int, arrays):
    kernel = _compiled(inputs, output, row_tile)
    out = tvm.runtime.tensor(np.zeros([int(d) for d in output.shape], np.float32))
    kernel["main"](*map(tvm.runtime.tensor, arrays), out)
    return out.numpy()


@pytest.mark.parametrize("row_tile", [1, 2, 4, 8])
@pytest.mark.parametrize("width", [48, 37])  # 37: no whole vectors (wav2vec2 normalizes 3199 steps)
def test_every_row_tile_computes_the_layer_norm(row_tile, width):
    x = te.placeholder((16, width), name="x")
    gamma, beta = te.placeholder((width,), name="g"), te.placeholder((width,), name="b")
    rng = np.random.default_rng(0)
    data = (rng.standard_normal((16, width)) * 3 + 5).astype(np.float32)
    g, b = rng.standard_normal(width).astype(np.float32), rng.standard_normal(width).astype(np.float32)
    out = _run([x, gamma, beta], layer_norm_rows(x, gamma, beta, 1e-5, 16), row_tile, [data, g, b])
    mean, var = data.mean(-1, keepdims=True), data.var(-1, keepdims=True)
    np.testing.assert_allclose(out, (data - mean) / np.sqrt(var + 1e-5) * g + b, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("row_tile", [1, 2, 4, 8])
@pytest.mark.parametrize("width", [32, 1006])  # 1006 = 2 x 503: no vector divides it (OCR heads' classes)
def test_every_row_tile_computes_the_softmax(row_tile, width):
    x = te.placeholder((2, 4, 8, width), name="x")
    data = (np.random.default_rng(1).standard_normal((2, 4, 8, width)) * 5).astype(np.float32)
    out = _run([x], softmax_rows(x, 16), row_tile, [data])
    exps = np.exp(data - data.max(-1, keepdims=True))
    np.testing.assert_allclose(out, exps / exps.sum(-1, keepdims=True), rtol=1e-5, atol=1e-7)


def test_a_softmax_over_a_row_no_vector_divides_runs_in_whole_vectors():
    # Its exponentials and outputs were 2 lanes wide and every partial sum guarded: an OCR
    # head's softmax over 18,710 classes took 5x the time of one over 18,720.
    kernel = _compiled([x := te.placeholder((40, 1006), name="x")], softmax_rows(x, 16), 1, AVX512_TARGET)
    text = kernel.mod.imports[0].inspect_source("asm") if kernel.mod.imports else kernel.mod.inspect_source("asm")
    assert re.search(r"vfmadd\d+ps\s+%zmm", text)  # the exponential's polynomial, a zmm at a time
    assert not re.search(r"vfmadd\d+ps\s+%xmm", text)
