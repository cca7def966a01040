"""Kernels of symbolic length (a sequence length left dynamic): the products compute their
rows (and columns) padded to whole tiles and store only the real ones; softmax rows of any
width. One compiled kernel, run at several lengths, equals numpy at each. So do products of
a static row count that no tile of 4 or more rows divides (ViT's 197 tokens), and the rows
of [1, 7, 7, C] tiled seven at a time."""

from __future__ import annotations

import numpy as np
import pytest
import tvm
from tvm import s_tir, te

from tvm_fuse.compute.matmul import dense_packed, matmul, pack_dense_weight
from tvm_fuse.compute.rowwise import softmax_rows
from tvm_fuse.ir_names import KNOBS_ATTR
from tvm_fuse.pipeline import TIR_PIPELINE
from tvm_fuse.schedules import RULES, apply
from tvm_fuse.schedules.common import anchor_block
from tvm_fuse.target import parse_target

LENGTHS = [1, 7, 16, 131]
pytestmark = pytest.mark.avx512  # compiled for this host, AVX-512 lanes


def _compiled(func):
    scheduled = apply(func, 16)
    assert scheduled.attrs[KNOBS_ATTR] == "default"  # scheduled by its rule, not left as it was
    return tvm.compile(tvm.IRModule({"main": scheduled}), target=parse_target("native"), tir_pipeline=TIR_PIPELINE)


def _run(kernel, inputs: list[np.ndarray], shape) -> np.ndarray:
    out = tvm.runtime.tensor(np.zeros(shape, np.float32))
    kernel["main"](*(tvm.runtime.tensor(a) for a in inputs), out)
    return out.numpy()


def _dense_with_bias(*lead):
    """A dense layer of 64 -> 48 columns plus 1 over `x [*lead, 64]`: (its default row tile,
    the compiled kernel)."""
    x = te.placeholder((*lead, 64), "float32", name="x")
    w = te.placeholder((3, 64, 16), "float32", name="w")
    product = dense_packed(x, w)
    out = te.compute(product.shape, lambda *i: product(*i) + 1.0, name="bias")
    func = te.create_prim_func([x, w, out])
    sch = s_tir.Schedule(func)
    block, rule = anchor_block(sch)
    return RULES[rule].default(sch, block, 16).row_tile, _compiled(func)


def test_a_dense_layer_of_symbolic_rows_tiles_them_as_static_ones():
    row_tile, kernel = _dense_with_bias(2, te.var("n"))
    assert row_tile == 8  # a padded count, not one row at a time
    rng = np.random.default_rng(0)
    weight = rng.standard_normal((64, 48)).astype(np.float32)
    for length in LENGTHS:
        data = rng.standard_normal((2, length, 64)).astype(np.float32)
        ours = _run(kernel, [data, pack_dense_weight(weight, 16)], (2, length, 48))
        np.testing.assert_allclose(ours, data @ weight + 1.0, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("rows, row_tile", [(197, 8), (49, 8), (47, 1), (198, 6)])
def test_static_rows_no_tile_divides_are_padded_too(rows, row_tile):
    """197 and 49 rows (ViT-B/16's and wav2vec2's tokens) are computed as 200 and 56 in tiles of
    8; 47 rows (padding would add more than 7/48) and 198 (tiles of 6) as they are."""
    default_tile, kernel = _dense_with_bias(1, rows)
    assert default_tile == row_tile
    rng = np.random.default_rng(0)
    weight = rng.standard_normal((64, 48)).astype(np.float32)
    data = rng.standard_normal((1, rows, 64)).astype(np.float32)
    ours = _run(kernel, [data, pack_dense_weight(weight, 16)], (1, rows, 48))
    np.testing.assert_allclose(ours, data @ weight + 1.0, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("lead, row_tile", [((1, 7, 7), 7), ((1, 14, 14), 7), ((1, 5, 15), 5), ((3, 3), 3)])
def test_rows_are_tiled_by_their_largest_divisor_up_to_8(lead, row_tile):
    """ConvNeXt's last stage runs its dense layers over [1, 7, 7, C]: 7 rows a tile, not 1."""
    default_tile, kernel = _dense_with_bias(*lead)
    assert default_tile == row_tile
    rng = np.random.default_rng(0)
    weight = rng.standard_normal((64, 48)).astype(np.float32)
    data = rng.standard_normal((*lead, 64)).astype(np.float32)
    ours = _run(kernel, [data, pack_dense_weight(weight, 16)], (*lead, 48))
    np.testing.assert_allclose(ours, data @ weight + 1.0, rtol=1e-5, atol=1e-4)


def test_attention_products_of_symbolic_length():
    n = te.var("n")
    q = te.placeholder((1, 2, n, 32), "float32", name="q")
    k = te.placeholder((1, 2, 32, n), "float32", name="k")
    kernel = _compiled(te.create_prim_func([q, k, matmul(q, k)]))
    rng = np.random.default_rng(1)
    for length in LENGTHS:
        a, b = (rng.standard_normal(s).astype(np.float32) for s in ((1, 2, length, 32), (1, 2, 32, length)))
        np.testing.assert_allclose(_run(kernel, [a, b], (1, 2, length, length)), a @ b, rtol=1e-5, atol=1e-4)


def test_softmax_rows_of_any_width():
    n = te.var("n")
    x = te.placeholder((2, n, n), "float32", name="x")
    kernel = _compiled(te.create_prim_func([x, softmax_rows(x, 16)]))
    rng = np.random.default_rng(2)
    for length in LENGTHS:
        data = rng.standard_normal((2, length, length)).astype(np.float32) * 4
        exps = np.exp(data - data.max(axis=-1, keepdims=True))
        np.testing.assert_allclose(_run(kernel, [data], data.shape), exps / exps.sum(axis=-1, keepdims=True),
                                   rtol=1e-5, atol=1e-6)
