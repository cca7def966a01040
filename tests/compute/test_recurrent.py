"""The dynamically quantized LSTM's sequence kernel on AVX512-VNNI (`lstm_vnni_sequence`):
`vpdpbusd` products of u8 state codes and packed s8 R codes, the same integer sums as the
portable kernel (`lstm_quantized_sequence`, int16 products) that ONNX Runtime's outputs check in
tests/frontend/test_dynamic_quantization.py, so the same outputs but for float rounding (LLVM
contracts the gates' arithmetic into FMAs differently in the two)."""

from __future__ import annotations

import re

import numpy as np
import pytest
import tvm

from tvm_fuse.codegen import llvm_modules
from tvm_fuse.compute.recurrent import lstm_quantized_sequence, lstm_vnni_sequence, pack_recurrent_quads
from tvm_fuse.pipeline import TIR_PIPELINE
from tvm_fuse.target import parse_target


def _compiled(func, target: str):
    return tvm.compile(tvm.IRModule({"main": func.with_attr("global_symbol", "main")}), target=parse_target(target),
                       tir_pipeline=TIR_PIPELINE)


def _run(kernel, *arrays, seq, directions, batch, hidden):
    outputs = [np.zeros((seq, directions, batch, hidden), np.float32)] + [np.zeros((directions, batch, hidden),
                                                                                   np.float32)] * 2
    tensors = [tvm.runtime.tensor(a) for a in (*arrays, *outputs)]
    kernel(*tensors)
    return [t.numpy() for t in tensors[-3:]]


def test_the_vnni_kernel_multiplies_with_vpdpbusd():
    kernel = _compiled(lstm_vnni_sequence(4, 2, 16, (False,)), "llvm -mcpu=cascadelake")
    assembly = "".join(m.inspect_source("asm") for m in llvm_modules(getattr(kernel, "mod", kernel)))
    assert re.search(r"vpdpbusd\s[^\n]*%zmm", assembly)


@pytest.mark.vnni
@pytest.mark.parametrize("reverse, batch, hidden", [((False,), 2, 32), ((False, True), 3, 16), ((True,), 1, 64)],
                         ids=str)
def test_the_vnni_kernel_equals_the_portable_one(reverse, batch, hidden):
    rng = np.random.default_rng(hidden)
    seq, directions, width = 7, len(reverse), 4 * hidden
    products = rng.standard_normal((seq, batch, directions * width)).astype(np.float32)
    codes = rng.integers(-128, 128, (directions, width, hidden)).astype(np.int8)
    codes[0, :3] = -128  # columns whose sums are largest
    scales = (rng.random((directions, width)) * 0.01).astype(np.float32)
    h0 = rng.standard_normal((directions, batch, hidden)).astype(np.float32)
    c0 = rng.standard_normal((directions, batch, hidden)).astype(np.float32)
    shape = {"seq": seq, "directions": directions, "batch": batch, "hidden": hidden}
    portable = _run(_compiled(lstm_quantized_sequence(seq, batch, hidden, reverse, "int8"), "native"),
                    products, codes, scales, h0, c0, **shape)
    vnni = _run(_compiled(lstm_vnni_sequence(seq, batch, hidden, reverse), "native"), products,
                pack_recurrent_quads(codes), codes.sum(axis=2, dtype=np.int32), scales, h0, c0, **shape)
    for ours, reference in zip(vnni, portable):
        np.testing.assert_allclose(ours, reference, rtol=1e-5, atol=1e-6)
