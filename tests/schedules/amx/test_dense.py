"""The matrix engine (AMX): bf16 dense layers on tiles where the target has AMX-BF16, the tile
intrinsics (bf16 and u8 x s8) and their knobs. The assembly tests compile for
`-mcpu=sapphirerapids` and run on any host; the execution tests run each tile program in
emulation on any host, and on the tiles (marker `amx`) where the OS lets this process use AMX."""

from __future__ import annotations

import re

import numpy as np
import pytest
import tvm
from tvm import te

import tvm_fuse
from tests.conftest import dense_model, ort_outputs
from tvm_fuse import QuantConfig
from tvm_fuse.benchmarking.models.built import transformer_encoder
from tvm_fuse.compute.bf16 import bits_of, pack_dense_pairs, value_of
from tvm_fuse.compute.dense_bf16 import dense_packed_bf16
from tvm_fuse.compute.dense_int8 import dense_int8_groups, pack_dense_quads, row_groups
from tvm_fuse.compute.matmul import pack_dense_weight
from tvm_fuse.ir_names import DENSE_AMX_RULE, KNOBS_ATTR, SCHEDULE_RULE
from tvm_fuse.pipeline import TIR_PIPELINE
from tvm_fuse.schedules import apply, knob_space
from tvm_fuse.schedules.amx.machine import Tiles, emulated_tiles
from tvm_fuse.target import host_cpu, host_features, parse_target

SAPPHIRE_RAPIDS = "llvm -mcpu=sapphirerapids"
TILE_INSTRUCTION = re.compile(r"\b(ldtilecfg|sttilecfg|tilezero|tileloadd\w*|tilestored|tilerelease|tdp\w+)\b")


def _bf16_build(target: str, rows=(32,), k: int = 64, n: int = 64):
    return tvm_fuse.build(dense_model(rows, k, n), target, precision="bf16")


def _functions_with(assembly: str, instruction: str) -> list[str]:
    """The names of the assembly's functions whose code has `instruction`."""
    chunks = re.split(r"\n\t\.type\t", assembly)[1:]  # each starts with a function's name
    return [chunk.split(",", 1)[0] for chunk in chunks if re.search(rf"\b{instruction}\b", chunk)]


def test_a_bf16_dense_on_an_amx_target_runs_on_tiles():
    model = _bf16_build(SAPPHIRE_RAPIDS)
    assembly = model.assembly()
    assert re.search(r"tdpbf16ps\s+%tmm", assembly) and re.search(r"tileloadd\s", assembly)
    assert "vdpbf16ps" not in assembly
    # Each parallel task loads the tile configuration itself: it is per thread.
    functions = _functions_with(assembly, "ldtilecfg")
    assert functions and all("parallel_lambda" in name for name in functions), functions
    assert model.uses_amx and model.metadata()["uses_amx"]


@pytest.mark.parametrize("target, k", [("llvm -mcpu=znver4", 64),  # AVX512-BF16 without AMX
                                       (SAPPHIRE_RAPIDS, 48)])  # K not a multiple of 32
def test_a_bf16_dense_without_amx_or_whose_shape_tiles_do_not_fit_uses_vdpbf16ps(target, k):
    model = _bf16_build(target, k=k)
    assembly = model.assembly()
    assert "vdpbf16ps" in assembly
    assert not TILE_INSTRUCTION.search(assembly)
    assert not model.uses_amx


def test_fp32_and_int8_builds_use_no_tiles():
    from tests.quantization.models import residual_block
    from tests.quantization.test_int8_build import TABLE

    fp32 = [tvm_fuse.build(dense_model((32,), 64, 64), cpu) for cpu in ("llvm -mcpu=cascadelake", SAPPHIRE_RAPIDS)]
    int8 = tvm_fuse.build(residual_block(), "llvm -mcpu=cascadelake", quantize=QuantConfig(calibration=TABLE))
    for model in [*fp32, int8]:
        assert not TILE_INSTRUCTION.search(model.assembly())
        assert not model.uses_amx


def _bf16_kernel(rows: tuple, k: int, n: int):
    """The scheduled bf16 AMX dense + 1 over x[*rows, k] (fp32) and W [k, n] packed."""
    x = te.placeholder((*rows, k), "float32", name="x")
    w = te.placeholder((n // 16, k // 2, 16, 2), "uint16", name="w")
    product = dense_packed_bf16(x, w, amx=True)
    out = te.compute(product.shape, lambda *i: product[i] + 1.0, name="bias")
    return te.create_prim_func([x, w, out])


def _int8_kernel(rows: tuple, k: int, n: int):
    """A u8 x s8 -> s32 dense over W packed [n/16, k/4, 16, 4], in the loop nest the AMX rule
    schedules (as the pipeline's int8 dense will be)."""
    x = te.placeholder((*rows, k), "uint8", name="x")
    w = te.placeholder((n // 16, k // 4, 16, 4), "int8", name="w")
    kw, kp = te.reduce_axis((0, k // 4), name="kw"), te.reduce_axis((0, 4), name="kp")

    def value(*idx):
        *lead, j = idx
        return te.sum(x[(*lead, kw * 4 + kp)].astype("int32") * w[j // 16, kw, j % 16, kp].astype("int32"),
                      axis=[kw, kp])

    out = te.compute((*rows, n), value, name="matmul", attrs={SCHEDULE_RULE: DENSE_AMX_RULE})
    return te.create_prim_func([x, w, out])


def _compiled(func, target: str, knobs: dict | None = None):
    scheduled = apply(func, 16, knobs)
    assert scheduled.attrs[KNOBS_ATTR] == ("tuned" if knobs else "default")  # scheduled, tensorized
    return tvm.compile(tvm.IRModule({"main": scheduled}), target=parse_target(target), tir_pipeline=TIR_PIPELINE)


def test_the_int8_tile_intrinsic_runs_tdpbusd():
    assembly = _compiled(_int8_kernel((32,), 128, 64), SAPPHIRE_RAPIDS).mod.inspect_source("asm")
    assert re.search(r"tdpbusd\s+%tmm", assembly) and "ldtilecfg" in assembly
    assert "tdpbf16ps" not in assembly


@pytest.mark.parametrize("rows, n, default", [((32,), 64, Tiles(16, 2, 2)), ((1,), 1536, Tiles(1, 1, 3)),
                                              ((7,), 48, Tiles(7, 1, 3)), ((2, 7), 32, Tiles(7, 1, 2)),
                                              ((12,), 16, Tiles(12, 1, 1))])
def test_every_tile_setting_fits_the_tile_registers_and_the_shape(rows, n, default):
    settings = [Tiles(**knobs) for knobs in knob_space(_bf16_kernel(rows, 64, n), 16)]
    assert settings[0] == default
    for tiles in settings:
        assert tiles.row_tiles * tiles.column_tiles + tiles.row_tiles + tiles.column_tiles <= 8
        assert rows[-1] % (tiles.rows * tiles.row_tiles) == 0 and n % (16 * tiles.column_tiles) == 0


def test_tuned_tiles_beyond_the_registers_fall_back_to_the_default():
    with pytest.warns(UserWarning, match="do not fit"):
        scheduled = apply(_bf16_kernel((32,), 64, 96), 16, {"rows": 16, "row_tiles": 2, "column_tiles": 3})
    assert scheduled.attrs[KNOBS_ATTR] == "default"


# Each tile program runs twice where AMX exists: as its emulation (`machine.emulated_tiles`, plain
# loops on any host: every address, stride and tile number the program uses) and on the tiles.
PROGRAMS = ["emulated", pytest.param("tiles", marks=pytest.mark.amx)]


def _executable(func, program: str, knobs: dict | None = None):
    if program == "emulated":
        with emulated_tiles():
            kernel = _compiled(func, "native", knobs)
        assert not TILE_INSTRUCTION.search(kernel.mod.inspect_source("asm"))
        return kernel
    return _compiled(func, "native", knobs)


def _run_bf16(rows, k, n, program, knobs=None):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((*rows, k)).astype(np.float32)
    w = rng.standard_normal((k, n)).astype(np.float32)
    out = tvm.runtime.tensor(np.zeros((*rows, n), np.float32))
    kernel = _executable(_bf16_kernel(rows, k, n), program, knobs)
    kernel["main"](tvm.runtime.tensor(x), tvm.runtime.tensor(pack_dense_pairs(pack_dense_weight(w, 16))), out)
    # bf16 products are exact in fp32; the tiles sum them in fp32 in their own order.
    expected = value_of(bits_of(x)).astype(np.float64) @ value_of(bits_of(w)).astype(np.float64) + 1.0
    np.testing.assert_allclose(out.numpy(), expected, rtol=0, atol=1e-5 * np.abs(expected).max())


@pytest.mark.parametrize("program", PROGRAMS)
@pytest.mark.parametrize("rows, k, n", [((1,), 384, 1536), ((7,), 64, 48), ((32,), 64, 64), ((2, 7), 32, 32),
                                        ((12,), 384, 96), ((128,), 384, 384)])
def test_the_bf16_amx_dense_equals_the_product_of_the_rounded_operands(rows, k, n, program):
    _run_bf16(rows, k, n, program)


@pytest.mark.parametrize("program", PROGRAMS)
def test_every_tile_setting_computes_the_same_product(program):
    for knobs in knob_space(_bf16_kernel((32,), 96, 96), 16):
        _run_bf16((32,), 96, 96, program, knobs)


@pytest.mark.parametrize("program", PROGRAMS)
@pytest.mark.parametrize("rows, k, n", [((1,), 64, 32), ((7,), 128, 48), ((32,), 256, 64), ((2, 16), 64, 96)])
def test_the_int8_amx_dense_equals_numpy_exactly(rows, k, n, program):
    rng = np.random.default_rng(0)
    x = rng.integers(0, 256, (*rows, k), dtype=np.uint8)
    w = rng.integers(-128, 128, (k, n), dtype=np.int8)
    packed = np.ascontiguousarray(w.reshape(k // 4, 4, n // 16, 16).transpose(2, 0, 3, 1))  # [n/16, k/4, 16, 4]
    out = tvm.runtime.tensor(np.zeros((*rows, n), np.int32))
    _executable(_int8_kernel(rows, k, n), program)["main"](tvm.runtime.tensor(x), tvm.runtime.tensor(packed), out)
    np.testing.assert_array_equal(out.numpy(), x.astype(np.int64) @ w.astype(np.int64))


@pytest.mark.parametrize("program", PROGRAMS)
@pytest.mark.parametrize("rows, k, n", [((1,), 64, 32), ((7,), 384, 48), ((32,), 256, 64), ((2, 16), 128, 96)])
def test_the_int8_amx_dense_on_groups_of_rows_equals_numpy(rows, k, n, program):
    """Each group of 64 values: a tile program's s32 block, scaled by the group's (scale, low)."""
    rng = np.random.default_rng(1)
    groups, size = row_groups(k)
    codes = rng.integers(0, 256, (*rows, k), dtype=np.uint8)
    w = rng.integers(-128, 128, (k, n), dtype=np.int8)
    params = np.stack([rng.uniform(0.01, 0.1, (*rows, groups)), rng.uniform(-3, 0, (*rows, groups))], -1)
    params = params.astype(np.float32)
    sums = w.astype(np.float32).reshape(groups, size, n).sum(axis=1)
    tensors = [te.placeholder(a.shape, str(a.dtype), name=name) for a, name in
               [(codes, "codes"), (params, "params"), (pack_dense_quads(w, 16), "w"), (sums, "sums")]]
    func = te.create_prim_func([*tensors, dense_int8_groups(*tensors, amx=True)])
    out = tvm.runtime.tensor(np.zeros((*rows, n), np.float32))
    _executable(func, program)["main"](*(tvm.runtime.tensor(a) for a in (codes, params, pack_dense_quads(w, 16), sums)),
                                       out)
    values = params[..., 1:] + params[..., :1] * codes.reshape(*rows, groups, size)
    expected = values.reshape(*rows, k).astype(np.float64) @ w.astype(np.float64)
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-5, atol=1e-5 * np.abs(expected).max())


def _amx_target_build(model, monkeypatch, **options):
    """`model` built for a host with AMX, its tile programs emulated, runnable here."""
    with emulated_tiles():
        built = tvm_fuse.build(model, f"llvm -mcpu={host_cpu()} -mattr=+amx-tile,+amx-int8,+amx-bf16", **options)
    monkeypatch.setattr("tvm_fuse.target.host_features", lambda: host_features() | {"amx", "amx_bf16"})
    return built


def _assert_the_product_of_rounded_operands(model) -> None:
    """`model` (dense_model((16,), 128, 64) in bf16) computes ReLU(x W) of x and W rounded to bf16."""
    x = np.random.default_rng(1).standard_normal((16, 128)).astype(np.float32)
    (y,) = model.run(None, {"x": x})
    w = np.random.default_rng(0).standard_normal((128, 64)).astype(np.float32)  # dense_model's weight
    expected = np.maximum(value_of(bits_of(x)).astype(np.float64) @ value_of(bits_of(w)).astype(np.float64), 0)
    np.testing.assert_allclose(y, expected, rtol=0, atol=1e-5 * np.abs(expected).max())


@pytest.mark.avx512
def test_a_bf16_model_for_an_amx_host_computes_its_dense_on_tiles(monkeypatch):
    model = _amx_target_build(dense_model((16,), 128, 64), monkeypatch, precision="bf16")
    assert not model.uses_amx  # emulated: no tile instruction
    _assert_the_product_of_rounded_operands(model)


@pytest.mark.amx
def test_a_bf16_model_built_for_this_amx_host_runs_on_tiles():
    model = _bf16_build("native", rows=(16,), k=128, n=64)
    assert model.uses_amx
    _assert_the_product_of_rounded_operands(model)


@pytest.mark.bf16
def test_a_bf16_encoder_for_an_amx_host_stays_close_to_fp32(monkeypatch):
    """Its dense layers on (emulated) tiles, the packed Q, K and V written by head for the
    attention kernel: within 5% of the largest output, as a bf16 attention block on VNNI
    (tests/transform/test_fuse_attention.py)."""
    encoder = transformer_encoder(batch=2, seq_len=32, hidden=64)
    model = _amx_target_build(encoder, monkeypatch, precision="bf16")
    assert model.precision == "bf16" and "attention" in [k["pattern"] for k in model.fusion_report()["kernels"]]
    on_vectors = tvm_fuse.build(encoder, f"llvm -mcpu={host_cpu()} -mattr=-amx-tile,-amx-int8,-amx-bf16", precision="bf16")
    # the dense layers left `vdpbf16ps` for (emulated) tiles; the attention kernels keep it
    assert 0 < model.assembly().count("vdpbf16ps") < on_vectors.assembly().count("vdpbf16ps")
    feed = {"hidden_states": np.random.default_rng(4).standard_normal((2, 32, 64)).astype(np.float32)}
    (ours,), (reference,) = model.run(None, feed), ort_outputs(encoder, feed)
    assert np.abs(ours - reference).max() <= 0.05 * np.abs(reference).max()


@pytest.mark.avx512
@pytest.mark.parametrize("mode, tolerance", [("dynamic", 0.03), ("calibrated", 0.05)])
def test_an_int8_encoder_for_an_amx_host_stays_close_to_fp32(monkeypatch, mode, tolerance):
    """As on VNNI (tests/quantization/test_int8_dense.py): dynamic, each value's error about 1%
    of its group's range; calibrated, one scale per tensor (3.1% measured there)."""
    encoder = transformer_encoder(batch=2, seq_len=32, hidden=64)
    rng = np.random.default_rng(3)
    samples = [{"hidden_states": rng.standard_normal((2, 32, 64)).astype(np.float32)} for _ in range(4)]
    quantize = QuantConfig(activations="dynamic") if mode == "dynamic" else \
        QuantConfig(calibration=samples, method="minmax")
    model = _amx_target_build(encoder, monkeypatch, quantize=quantize)
    assert "vpdpbusd" not in model.assembly()  # every dense layer on (emulated) tiles, none on VNNI
    feed = {"hidden_states": np.random.default_rng(4).standard_normal((2, 32, 64)).astype(np.float32)}
    (ours,), (reference,) = model.run(None, feed), ort_outputs(encoder, feed)
    assert np.abs(ours - reference).max() <= tolerance * np.abs(reference).max()
