"""The bf16 dense kernel computes the product of the bf16-rounded input and weights, summed in
fp32: on `vdpbf16ps` where the host has AVX512-BF16, everywhere in its portable form."""

from __future__ import annotations

import numpy as np
import pytest
import tvm
from tvm import te

from tvm_fuse.compute.bf16 import bits_of, pack_dense_pairs, value_of
from tvm_fuse.compute.dense_bf16 import dense_packed_bf16
from tvm_fuse.compute.matmul import pack_dense_weight
from tvm_fuse.ir_names import KNOBS_ATTR
from tvm_fuse.pipeline import TIR_PIPELINE
from tvm_fuse.schedules import apply
from tvm_fuse.target import parse_target


@pytest.mark.parametrize("native", [pytest.param(True, marks=pytest.mark.bf16), False])
@pytest.mark.parametrize("rows, k, n, block", [(1, 64, 32, 16), (12, 384, 96, 16), ((2, 7), 32, 48, 16), (5, 18, 24, 8)])
def test_bf16_dense_equals_the_product_of_the_rounded_operands(native, rows, k, n, block):
    rows = rows if isinstance(rows, tuple) else (rows,)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((*rows, k)).astype(np.float32)
    w = rng.standard_normal((k, n)).astype(np.float32)
    packed = pack_dense_pairs(pack_dense_weight(w, block))
    x_t = te.placeholder(x.shape, "float32", name="x")
    w_t = te.placeholder(packed.shape, "uint16", name="w")
    product = dense_packed_bf16(x_t, w_t, native)
    out_t = te.compute(product.shape, lambda *i: product[i] + 1.0, name="bias")
    func = apply(te.create_prim_func([x_t, w_t, out_t]), 16)
    assert func.attrs[KNOBS_ATTR] == "default"  # scheduled (tensorized) by its rule
    kernel = tvm.compile(tvm.IRModule({"main": func}), target=parse_target("native"), tir_pipeline=TIR_PIPELINE)
    out = tvm.runtime.tensor(np.zeros((*rows, n), np.float32))
    kernel["main"](tvm.runtime.tensor(x), tvm.runtime.tensor(packed), out)
    expected = value_of(bits_of(x)).astype(np.float64) @ value_of(bits_of(w)).astype(np.float64) + 1.0
    np.testing.assert_allclose(out.numpy(), expected, rtol=0, atol=1e-5 * np.abs(expected).max())
