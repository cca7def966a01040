"""Kernels TVM lowers itself get parallel loops, and vectors where the width divides."""

from __future__ import annotations

import re

import numpy as np
import pytest
import tvm
from tvm import relax, te, topi

import tvm_fuse
from tests.transform.relax_modules import module
from tvm_fuse.codegen import llvm_modules
from tvm_fuse.ir_names import PEEL_ATTR
from tvm_fuse.pipeline import TIR_PIPELINE, compile_lowered, lowered, optimize
from tvm_fuse.schedules import generic
from tvm_fuse.target import parse_target


def _func(*tensors):
    return te.create_prim_func(list(tensors))


def _kernel(func, target):
    """A scheduled PrimFunc compiled as TVM's kernels are."""
    return tvm.compile(tvm.IRModule({"main": func.with_attr("global_symbol", "main")}), target=target,
                       tir_pipeline=TIR_PIPELINE)


def test_an_elementwise_kernel_is_parallel_and_vectorized():
    x = te.placeholder((4, 8, 14, 32), name="x")
    func = generic.schedule(_func(x, topi.nn.relu(x)), parse_target("llvm"), 16)
    text = func.script()
    assert "T.parallel" in text and "T.vectorized" in text


def test_a_row_the_vector_width_does_not_divide_is_vectors_but_its_last_and_exact():
    """magika's GELU over rows of 508 (before a max over them) ran scalar, 0.48 of its 2.3 ms."""
    x = te.placeholder((1, 64, 508), name="x")
    y = te.compute(x.shape, lambda *i: x(*i) * te.sigmoid(x(*i) * 1.702), name="gelu")
    target = parse_target("llvm -mcpu=skylake-avx512")
    kernel = _kernel(generic.schedule(_func(x, y), target, 16), target)
    assembly = "".join(m.inspect_source("asm") for m in llvm_modules(getattr(kernel, "mod", kernel)))
    assert re.search(r"vmulps\s[^\n]*%zmm", assembly), "the row is not multiplied a zmm vector at a time"
    if "avx512f" in tvm_fuse.host_features():
        data = np.random.default_rng(0).standard_normal((1, 64, 508)).astype("float32")
        out = tvm.runtime.tensor(np.zeros_like(data))
        kernel(tvm.runtime.tensor(data), out)
        np.testing.assert_allclose(out.numpy(), data / (1 + np.exp(-1.702 * data)), rtol=1e-5, atol=1e-6)



def test_a_reshape_of_a_cropped_row_reads_it_a_vector_at_a_time_and_is_exact():
    # TOPI's reshape reads x[0, (j // n + i) % 40, j % n] for j < n: once its loop is split into
    # vectors, every lane divided (a dense layer's cropped 6,906 columns: 0.13 ms, now 0.04 ms).
    x = te.placeholder((1, 40, 1008), name="x")
    cropped = topi.strided_slice(x, [0, 0, 0], [1, 40, 1006])
    func = generic.schedule(_func(x, topi.reshape(cropped, (40, 1006))), parse_target("llvm"), 16)
    assert "//" not in func.script().split("T.writes")[-1]  # the store's read, past the access regions
    data = np.random.default_rng(0).standard_normal((1, 40, 1008)).astype(np.float32)
    out = tvm.runtime.tensor(np.zeros((40, 1006), np.float32))
    _kernel(func, parse_target("llvm"))["main"](tvm.runtime.tensor(data), out)
    np.testing.assert_array_equal(out.numpy(), data[0, :, :1006])


def test_a_chain_of_elementwise_stages_is_one_vectorized_pass_and_exact():
    """DenseNet's pre-activation in int8 as TVM fuses it: concat, batch norm (multiply, add),
    ReLU, quantize to u8. One loop nest, no intermediate tensor, the u8 stores vectorized (each
    stage used to be a pass of its own, writing a tensor the next read)."""
    a = te.placeholder((1, 2, 4, 4, 16), name="a")
    b = te.placeholder((1, 1, 4, 4, 16), name="b")
    scale = te.placeholder((1, 3, 1, 1, 16), name="scale")
    shift = te.placeholder((1, 3, 1, 1, 16), name="shift")
    joined = topi.concatenate([a, b], axis=1)
    normalized = topi.nn.relu(topi.add(topi.multiply(joined, scale), shift))
    codes = te.compute(normalized.shape, lambda *i: te.min(te.round(normalized(*i) * 20.0), 255.0).astype("uint8"),
                       name="quantize")
    target = parse_target("llvm")
    func = generic.schedule(_func(a, b, scale, shift, codes), target, 16)
    text = func.script()
    assert "sblock_alloc_buffer" not in text and text.count("T.parallel") == 1 and "T.vectorized(16)" in text
    kernel = _kernel(func, target)
    rng = np.random.default_rng(0)
    args = [rng.standard_normal([int(d) for d in t.shape]).astype("float32") for t in (a, b, scale, shift)]
    out = tvm.runtime.tensor(np.zeros((1, 3, 4, 4, 16), "uint8"))
    kernel(*map(tvm.runtime.tensor, args), out)
    expected = np.maximum(np.concatenate(args[:2], axis=1) * args[2] + args[3], 0)
    # Within one code: the kernel may fuse the multiply and add (one rounding fewer).
    reference = np.minimum(np.round(expected * 20), 255)
    np.testing.assert_allclose(out.numpy().astype(np.float32), reference, rtol=0, atol=1)

@pytest.mark.parametrize("dtype", ["float32", "uint8"])
def test_a_blocked_pooling_kernel_is_parallel_vectorized_and_exact(dtype):
    """A 3x3 stride-2 max-pool with padding, as ResNet's: one vector of lanes per window tap,
    the padding read in place (no padded copy)."""
    x = te.placeholder((1, 4, 16, 16, 16), dtype, name="x")
    pooled = topi.nn.pool2d(x, (3, 3), (2, 2), (1, 1), (1, 1, 1, 1), "max", layout="NCHW16c")
    target = parse_target("llvm")
    func = generic.schedule(_func(x, pooled), target, 16)
    text = func.script()
    assert "T.parallel" in text and "T.vectorized(16)" in text and "pad_temp" not in text
    kernel = _kernel(func, target)
    data = np.random.default_rng(0).integers(0, 256, (1, 4, 16, 16, 16)).astype(dtype)
    out = tvm.runtime.tensor(np.zeros((1, 4, 8, 8, 16), dtype))
    kernel(tvm.runtime.tensor(data), out)
    low = np.finfo(dtype).min if dtype == "float32" else 0
    padded = np.pad(data, ((0, 0), (0, 0), (1, 1), (1, 1), (0, 0)), constant_values=low)
    windows = [padded[:, :, dy:dy + 16:2, dx:dx + 16:2] for dy in range(3) for dx in range(3)]
    np.testing.assert_array_equal(out.numpy(), np.max(windows, axis=0))


def test_a_sum_over_channels_takes_a_vector_of_its_innermost_axis_at_a_time_and_is_exact():
    """magika's sums over the 512 channels of [1, 512, 256] read each channel's row in strides of
    256 floats, one scalar at a time, on one core (the only spatial loop left was the batch)."""
    x = te.placeholder((1, 512, 256), name="x")
    y = topi.sum(topi.multiply(x, x), axis=1)
    target = parse_target("llvm")
    func = generic.schedule(_func(x, y), target, 16)
    text = func.script()
    assert "T.parallel(16)" in text and "T.vectorized(16)" in text and "sblock_alloc_buffer" not in text
    kernel = _kernel(func, target)
    data = np.random.default_rng(0).standard_normal((1, 512, 256)).astype("float32")
    out = tvm.runtime.tensor(np.zeros((1, 256), "float32"))
    kernel(tvm.runtime.tensor(data), out)
    np.testing.assert_allclose(out.numpy(), (data.astype(np.float64) ** 2).sum(axis=1), rtol=1e-4)


def test_a_reduction_along_the_innermost_axis_keeps_its_loop_order():
    """A row sum (as in softmax or a norm) is no pooling window: its rows are not vectors."""
    x = te.placeholder((16, 16), name="x")
    func = generic.schedule(_func(x, topi.sum(x, axis=1)), parse_target("llvm"), 16)
    assert "T.vectorized" not in func.script()


def test_softmax_runs_as_the_fast_approximation_within_fp32_noise():
    """Over another axis than the last (else it is our rowwise kernel)."""
    def build(bb, x):
        return bb.emit(relax.op.nn.softmax(x, axis=0))

    mod = module({"x": (100, 4)}, build)
    target = parse_target("llvm")
    kernels = lowered(optimize(mod, target), target)
    assert [gv.name_hint for gv, f in kernels.functions_items() if isinstance(f, tvm.tirx.PrimFunc)] == ["fast_softmax"]
    executable = compile_lowered(kernels, target)
    x = np.random.default_rng(0).uniform(-20, 20, (100, 4)).astype("float32")
    out = relax.VirtualMachine(executable, tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()
    expected = np.exp(x - x.max(0, keepdims=True))
    expected /= expected.sum(0, keepdims=True)
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-7)


def _layout_transform(shape, index_map, pad_value=None) -> tvm.tirx.PrimFunc:
    """The kernel TVM legalizes a Relax `layout_transform` to."""
    builder = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType(shape, "float32"))
    with builder.function("main", [x]):
        builder.emit_func_output(builder.emit(relax.op.layout_transform(x, index_map, pad_value=pad_value)))
    legalized = relax.transform.LegalizeOps()(builder.get())
    return next(f for f in legalized.functions.values() if isinstance(f, tvm.tirx.PrimFunc))


_LAYOUT_TRANSFORMS = {  # input shape, index map, pad value, numpy reference
    "nchw16c_to_nchw": ((1, 2, 32, 48, 16), lambda n, c, h, w, i: (n, c * 16 + i, h, w), None,
                        lambda x: x.transpose(0, 1, 4, 2, 3).reshape(1, 32, 32, 48)),
    "nchw_to_nchw16c": ((1, 32, 32, 48), lambda n, c, h, w: (n, c // 16, h, w, c % 16), None,
                        lambda x: x.reshape(1, 2, 16, 32, 48).transpose(0, 1, 3, 4, 2)),
    "rgb_to_nchw16c": ((1, 3, 32, 48), lambda n, c, h, w: (n, c // 16, h, w, c % 16), 0.0,
                       lambda x: np.pad(x, [(0, 0), (0, 13), (0, 0), (0, 0)]).reshape(1, 1, 16, 32, 48).transpose(0, 1, 3, 4, 2)),
    "nchw8c_to_nchw": ((1, 3, 3, 96, 8), lambda n, c, h, w, i: (n, c * 8 + i, h, w), None,
                       lambda x: x.transpose(0, 1, 4, 2, 3).reshape(1, 24, 3, 96)),
    "nchw_to_nchw8c": ((1, 24, 3, 96), lambda n, c, h, w: (n, c // 8, h, w, c % 8), None,
                       lambda x: x.reshape(1, 3, 8, 3, 96).transpose(0, 1, 3, 4, 2)),
    "odd_width": ((1, 2, 9, 33, 16), lambda n, c, h, w, i: (n, c * 16 + i, h, w), None,
                  lambda x: x.transpose(0, 1, 4, 2, 3).reshape(1, 32, 9, 33)),
    "odd_time_steps": ((1, 48, 37), lambda n, c, t: (n, t, c), None, lambda x: x.transpose(0, 2, 1)),
    "neither_divides": ((1, 9, 33), lambda n, c, t: (n, t, c), None, lambda x: x.transpose(0, 2, 1)),
}


@pytest.mark.parametrize("case", sorted(_LAYOUT_TRANSFORMS))
def test_a_layout_transform_moves_square_tiles_and_is_exact(case):
    """Between NCHW and NCHW16c (or 8c) the written and read innermost axes differ: the kernel
    moves 16 x 16 (or 8 x 16) tiles (an unrolled loop of one axis around a vectorized loop of
    the other), so that neither side is accessed a row apart per value; along an odd width
    (33, 37) the last tile is cut short. Where neither axis is whole vectors, the kernel keeps
    the plain schedule."""
    shape, index_map, pad_value, reference = _LAYOUT_TRANSFORMS[case]
    target = parse_target("llvm")
    func = generic.schedule(_layout_transform(shape, index_map, pad_value), target, 16)
    text = func.script()
    tiled = "T.unroll(" in text and "T.vectorized(" in text
    assert tiled == (case != "neither_divides"), text
    kernel = _kernel(func, target)
    x = np.random.default_rng(0).standard_normal(shape).astype("float32")
    expected = reference(x)
    out = tvm.runtime.tensor(np.full(expected.shape, np.nan, "float32"))
    kernel(tvm.runtime.tensor(x), out)
    np.testing.assert_array_equal(out.numpy(), expected)


def _symbolic_kernel(shape, op) -> tvm.tirx.PrimFunc:
    """The kernel TVM legalizes `op(x)` to, for `x` of `shape` (names are symbolic dims)."""
    dims = {name: tvm.tirx.Var(name, "int64") for name in shape if isinstance(name, str)}
    builder = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType([dims.get(d, d) for d in shape], "float32"))
    with builder.function("main", [x]):
        builder.emit_func_output(builder.emit(op(x)))
    legalized = relax.transform.LegalizeOps()(builder.get())
    return next(f for f in legalized.functions.values() if isinstance(f, tvm.tirx.PrimFunc))


_SYMBOLIC_TRANSPOSES = {  # input shape, op, numpy reference, the sizes run
    "nchw16c_to_nchw": (("n", 2, "h", "w", 16), lambda x: relax.op.layout_transform(
        x, lambda n, c, h, w, i: (n, c * 16 + i, h, w)), lambda x: x.transpose(0, 1, 4, 2, 3).reshape(
        x.shape[0], 32, *x.shape[2:4]), [(1, 2, 5, 33, 16), (2, 2, 3, 48, 16)]),
    "tokens_to_channels": (("n", "s", 64), lambda x: relax.op.permute_dims(x, [0, 2, 1]),
                           lambda x: x.transpose(0, 2, 1), [(1, 37, 64), (2, 64, 64)]),
}


@pytest.mark.parametrize("case", sorted(_SYMBOLIC_TRANSPOSES))
def test_a_symbolic_transpose_moves_tiles_on_every_core_and_is_exact(case):
    """Along a symbolic axis the tile's vectors run too, the last one peeled; the parallel loop
    reaches past a symbolic batch (of one image, most often). SegFormer's symbolic build ran
    such copies scalar, a row apart per value, on one core: 3.9x ONNX Runtime's whole run."""
    shape, op, reference, sizes = _SYMBOLIC_TRANSPOSES[case]
    target = parse_target("llvm")
    func = generic.schedule(_symbolic_kernel(shape, op), target, 16)
    text = func.script()
    assert "T.unroll(" in text and "T.vectorized(" in text and PEEL_ATTR in text, text
    parallel = re.search(r"in T\.parallel\((.*)\):", text).group(1)
    assert parallel.startswith("n *"), parallel  # the batch fused with the loops after it
    kernel = _kernel(func, target)
    for size in sizes:
        x = np.random.default_rng(0).standard_normal(size).astype("float32")
        expected = reference(x)
        out = tvm.runtime.tensor(np.full(expected.shape, np.nan, "float32"))
        kernel(tvm.runtime.tensor(x), out)
        np.testing.assert_array_equal(out.numpy(), expected)


@pytest.mark.parametrize("reduction", ["max", "min", "sum"])
@pytest.mark.parametrize("shape", [(2, 48, 40), (3, 5, 7)])
def test_a_whole_tensor_reduction_folds_a_vector_at_a_time_and_is_exact(reduction, shape):
    """A dynamically quantized tensor's range (its min and max over every value) took one
    scalar step per value: 0.1 ms for a [128, 1536] activation. Where the vector width divides
    the tensor, the kernel keeps a vector of partial results; elsewhere it stays as it was."""
    x = te.placeholder(shape, name="x")
    axes = [te.reduce_axis((0, extent)) for extent in shape]
    reducer = {"max": te.max, "min": te.min, "sum": te.sum}[reduction]
    total = te.compute((), lambda: reducer(x[tuple(axes)], axis=axes), name="total")
    target = parse_target("llvm")
    func = generic.schedule(_func(x, total), target, 16)
    assert ("T.vectorized" in func.script()) == (np.prod(shape) % 16 == 0)
    data = np.random.default_rng(0).standard_normal(shape).astype("float32")
    out = tvm.runtime.tensor(np.zeros((), "float32"))
    _kernel(func, target)(tvm.runtime.tensor(data), out)
    np.testing.assert_allclose(out.numpy(), getattr(np, reduction)(data), rtol=1e-6, atol=1e-6)


def test_rounding_to_even_runs_a_vector_at_a_time_and_is_exact():
    """ONNX Round and every quantize round with nearbyint, for which TVM registers no vector
    form: its loops were scalarized, then vectorized by LLVM with gathers and scatters, 5.6x
    slower than one `vrndscaleps` per vector (`tvm_fuse.pipeline` registers that form)."""
    x = te.placeholder((4, 64), name="x")
    rounded = te.compute(x.shape, lambda *i: te.nearbyint(x(*i) * 0.5), name="rounded")
    target = parse_target("llvm -mcpu=skylake-avx512")
    kernel = _kernel(generic.schedule(_func(x, rounded), target, 16), target)
    assembly = "".join(m.inspect_source("asm") for m in llvm_modules(getattr(kernel, "mod", kernel)))
    assert re.search(r"vrndscaleps\s[^\n]*%zmm", assembly) and "vgather" not in assembly
    if "avx512f" in tvm_fuse.host_features():
        data = ((np.arange(256).reshape(4, 64) - 128) + 0.5 * (np.arange(64) % 2)).astype("float32")  # ties
        out = tvm.runtime.tensor(np.zeros_like(data))
        kernel(tvm.runtime.tensor(data), out)
        np.testing.assert_array_equal(out.numpy(), np.round(data * np.float32(0.5)))
