"""NativeBf16Rounding: compiled for a CPU with AVX512-BF16, every 16-lane fp32 -> bf16
rounding of a bf16 build is one `vcvtneps2bf16` (none left as integer arithmetic and a
narrowing move), and it rounds as `compute.bf16.to_bits` does, ties to even; without
AVX512-BF16 the integer rounding stays."""

from __future__ import annotations

import re

import numpy as np
import pytest
import tvm
from tvm import s_tir, te

import tvm_fuse
from tvm_fuse.benchmarking.models.built import transformer_encoder
from tvm_fuse.compute.bf16 import bits_of, to_bits
from tvm_fuse.pipeline import TIR_PIPELINE
from tvm_fuse.target import parse_target

SIZE = 4096


def _rounding_kernel(mcpu: str):
    """`y = to_bits(x * 2)`, 16 lanes at a time."""
    x = te.placeholder((SIZE,), name="x")
    sch = s_tir.Schedule(te.create_prim_func([x, te.compute((SIZE,), lambda i: to_bits(x[i] * 2.0), name="y")]))
    _, lanes = sch.split(sch.get_loops(sch.get_sblock("y"))[0], [None, 16])
    sch.vectorize(lanes)
    return tvm.compile(tvm.IRModule({"main": sch.mod["main"]}), target=parse_target(f"llvm -mcpu={mcpu}"),
                       tir_pipeline=TIR_PIPELINE)


def _count(instruction: str, assembly: str) -> int:
    return len(re.findall(rf"\b{instruction}\b", assembly))


@pytest.mark.parametrize("mcpu, native", [("znver4", True), ("sapphirerapids", True), ("cascadelake", False)])
def test_the_rounding_is_one_instruction_where_the_target_has_it(mcpu, native):
    assembly = _rounding_kernel(mcpu).mod.inspect_source("asm")
    assert (_count("vcvtneps2bf16", assembly) > 0) == native
    assert (_count("vpmovdw", assembly) == 0) == native


def test_every_vector_rounding_of_a_bf16_encoder_is_the_instruction():
    """Compiled for Zen 4, on any host: its dense layers' inputs and outputs, the attention's
    Q and exponentials (its K and V are rounded two values at a time, and keep the integer
    form)."""
    model = tvm_fuse.build(transformer_encoder(batch=1, seq_len=32, hidden=64), "llvm -mcpu=znver4",
                           precision="bf16")
    assembly = model.assembly()
    assert _count("vcvtneps2bf16", assembly) >= 4 and _count("vpmovdw", assembly) == 0


@pytest.mark.bf16
def test_it_rounds_as_to_bits_does():
    """Random values, and halfway cases (the lower 16 bits 0x8000) of even and odd upper halves,
    which round to even."""
    rng = np.random.default_rng(0)
    values = (rng.standard_normal(SIZE) * 100).astype(np.float32)
    halfway = ((rng.integers(0x3F80, 0x4780, SIZE // 2).astype(np.uint32) << 16) | 0x8000).view(np.float32)
    values[: SIZE // 2] = halfway / 2  # the kernel doubles them back
    out = tvm.runtime.tensor(np.zeros(SIZE, np.uint16))
    _rounding_kernel("znver4")["main"](tvm.runtime.tensor(values), out)
    np.testing.assert_array_equal(out.numpy(), bits_of(values * 2))
