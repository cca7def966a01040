"""Convs on AMX tiles (`schedules.amx.conv`): int8 (`tdpbusd`) exactly the integer conv, bf16
(`tdpbf16ps`) the conv of the rounded operands, for 1x1, 3x3, strided and dilated windows and
every tile setting; each tile program in emulation on any host and on the tiles where AMX is
permitted (`test_dense.py`'s PROGRAMS); whole models built for a target with AMX."""

from __future__ import annotations

import re
from dataclasses import asdict

import numpy as np
import pytest
import tvm
from onnx import TensorProto, helper, numpy_helper
from tvm import te

import tvm_fuse
from tests.conftest import assert_close, ort_outputs
from tests.quantization.models import residual_block
from tests.quantization.test_int8_build import TABLE
from tests.schedules.amx.test_dense import PROGRAMS, SAPPHIRE_RAPIDS, TILE_INSTRUCTION, _amx_target_build, _executable
from tvm_fuse import QuantConfig
from tvm_fuse.compute.bf16 import bits_of, pack_pairs, value_of
from tvm_fuse.compute.conv import fold_row_taps, fold_weight_taps, merge_input_blocks, split_output_blocks
from tvm_fuse.compute.conv_nchwc_bf16 import conv2d_nchwc_bf16
from tvm_fuse.compute.conv_nchwc_int8 import conv2d_nchwc_int8
from tvm_fuse.frontend import relax_module
from tvm_fuse.ir_names import KNOBS_ATTR
from tvm_fuse.pipeline import TIR_PIPELINE, optimize
from tvm_fuse.quantization.weights import pack_vnni
from tvm_fuse.schedules import apply, common, knob_space
from tvm_fuse.schedules.amx import conv as conv_amx
from tvm_fuse.schedules.amx.conv import ConvTiles
from tvm_fuse.target import host_cpu, parse_target
from tvm_fuse.transform.lower_composites import WINOGRAD_SWITCH
from tvm_fuse.transform.realize.bf16 import bf16_pass

# The host's vector units, AMX switched off where it has it.
VECTOR_HOST = f"llvm -mcpu={host_cpu()} -mattr=-amx-tile,-amx-int8,-amx-bf16"
# (input blocks, block, output blocks, size, kernel, stride, padding, dilation)
WINDOWS = [(2, 16, 2, 8, 1, 1, 0, 1), (2, 16, 3, 8, 3, 1, 1, 1), (1, 16, 4, 9, 3, 2, 1, 1),
           (1, 8, 1, 10, 3, 1, 2, 2), (2, 16, 2, 7, 1, 2, 0, 1)]


def _reference(data: np.ndarray, weight: np.ndarray, stride: int, pad: int, dilation: int, pad_value=0):
    """NCHW{c}c data x [O/16, I/c, kh, kw, c/pack, 16, pack] weights, in NCHW16c, in float64
    (exact for the int8 products' sums)."""
    n, chunks, size, _, block = data.shape
    out_chunks, _, kernel, _, words, lanes, pack = weight.shape
    padded = np.full((n, chunks, size + 2 * pad, size + 2 * pad, block), pad_value, np.float64)
    padded[:, :, pad:pad + size, pad:pad + size] = data
    planes = padded.transpose(0, 1, 4, 2, 3).reshape(n, chunks * block, *padded.shape[2:4])
    kernels = weight.transpose(0, 5, 1, 4, 6, 2, 3).reshape(out_chunks * lanes, chunks * block, kernel, kernel)
    out = (size + 2 * pad - dilation * (kernel - 1) - 1) // stride + 1
    result = np.zeros((n, out_chunks * lanes, out, out))
    for ky in range(kernel):
        for kx in range(kernel):
            y, x = ky * dilation, kx * dilation
            window = planes[:, :, y:y + stride * (out - 1) + 1:stride, x:x + stride * (out - 1) + 1:stride]
            result += np.einsum("nchw,oc->nohw", window, kernels[:, :, ky, kx].astype(np.float64))
    return result.reshape(n, out_chunks, lanes, out, out).transpose(0, 1, 3, 4, 2)


def _int8_kernel(window, zero_point: int = 3, out_block: int = 16):
    chunks, block, out_chunks, size, kernel, stride, pad, dilation = window
    data = te.placeholder((1, chunks, size, size, block), "uint8", name="data")
    weight = te.placeholder((out_chunks, chunks, kernel, kernel, block // 4, out_block, 4), "int8", name="weight")
    out = conv2d_nchwc_int8(data, weight, (stride,) * 2, (pad,) * 4, (dilation,) * 2, zero_point, amx=True)
    return te.create_prim_func([data, weight, out])


def _bf16_kernel(window, fp32_input: bool, out_block: int = 16):
    chunks, block, out_chunks, size, kernel, stride, pad, dilation = window
    data = te.placeholder((1, chunks, size, size, block), "float32" if fp32_input else "uint16", name="data")
    weight = te.placeholder((out_chunks, chunks, kernel, kernel, block // 2, out_block, 2), "uint16", name="weight")
    out = conv2d_nchwc_bf16(data, weight, (stride,) * 2, (pad,) * 4, (dilation,) * 2, amx=True)
    return te.create_prim_func([data, weight, out])


def _run(func, program: str, inputs: list[np.ndarray], expected: np.ndarray, knobs: dict | None = None):
    """The kernel's output (of `expected`'s shape: s32 for u8 data, fp32 otherwise)."""
    kernel = _executable(func, program, knobs)
    out = tvm.runtime.tensor(np.zeros(expected.shape, np.int32 if inputs[0].dtype == np.uint8 else np.float32))
    kernel["main"](*(tvm.runtime.tensor(np.ascontiguousarray(a)) for a in inputs), out)
    return out.numpy()


def _int8_operands(window, out_block: int = 16):
    chunks, block, out_chunks, size, kernel, *_ = window
    rng = np.random.default_rng(0)
    return [rng.integers(0, 256, (1, chunks, size, size, block), dtype=np.uint8),
            rng.integers(-128, 128, (out_chunks, chunks, kernel, kernel, block // 4, out_block, 4), dtype=np.int8)]


@pytest.mark.parametrize("program", PROGRAMS)
@pytest.mark.parametrize("window", WINDOWS)
def test_an_int8_conv_on_tiles_is_exact(window, program):
    data, weight = _int8_operands(window)
    *_, stride, pad, dilation = window
    expected = _reference(data, weight, stride, pad, dilation, pad_value=3)
    np.testing.assert_array_equal(_run(_int8_kernel(window), program, [data, weight], expected), expected)


@pytest.mark.parametrize("program", PROGRAMS)
@pytest.mark.parametrize("fp32_input", [True, False])
@pytest.mark.parametrize("window", [WINDOWS[1], WINDOWS[2]])
def test_a_bf16_conv_on_tiles_is_the_conv_of_the_rounded_operands(window, fp32_input, program):
    chunks, block, out_chunks, size, kernel, stride, pad, dilation = window
    rng = np.random.default_rng(0)
    data = rng.standard_normal((1, chunks, size, size, block)).astype(np.float32)
    weight = bits_of(rng.standard_normal((out_chunks, chunks, kernel, kernel, block // 2, 16, 2)))
    expected = _reference(value_of(bits_of(data)), value_of(weight), stride, pad, dilation)
    ours = _run(_bf16_kernel(window, fp32_input), program, [data if fp32_input else bits_of(data), weight], expected)
    np.testing.assert_allclose(ours, expected, rtol=0, atol=1e-5 * np.abs(expected).max())


@pytest.mark.parametrize("program", PROGRAMS)
def test_every_conv_tile_setting_computes_the_same_conv(program):
    window = (2, 16, 4, 8, 3, 1, 1, 1)
    data, weight = _int8_operands(window)
    expected = _reference(data, weight, 1, 1, 1, pad_value=3)
    settings = knob_space(_int8_kernel(window), 16)
    assert len(settings) > 10 and {k["blocks"] for k in settings} == {1, 2, 4}  # C blocks per program
    assert {k["output_rows"] for k in settings} == {1, 2, 4, 8}  # C blocks over several output rows
    assert {k["width"] for k in settings} == {0, 8}  # and tiles run over whole rows (`test_tiles_run_...`)
    for knobs in settings:
        scheduled = apply(_int8_kernel(window), 16, knobs)
        assert scheduled.attrs[KNOBS_ATTR] == "tuned", knobs
        np.testing.assert_array_equal(_run(_int8_kernel(window), program, [data, weight], expected, knobs), expected)


@pytest.mark.parametrize("program", PROGRAMS)
@pytest.mark.parametrize("size, kernel, computed, default, rows", [(7, 1, (8, 7), ConvTiles(14, 2, 2, 1, 4, 7), 7),
                                                                   (7, 3, (8, 7), ConvTiles(16, 1, 2, 1, 2, 7), 7),
                                                                   (17, 3, (18, 18), ConvTiles(9, 2, 2, 1, 1), 9)])
def test_a_conv_on_tiles_computes_whole_tiles_and_crops(size, kernel, computed, default, rows, program):
    """A 7 x 7 output (ResNet-50's last stage) is computed in 8 rows, so that C blocks on 2 or 4
    output rows reuse each B tile (weights) 2 or 4 times, in 7-pixel tiles or in runs of tiles
    over whole rows; a row of 17 pixels (no tile from 8 to 16 divides it; SqueezeNet's 111) in
    18 (tiles of 9). The extra rows and columns are cut off."""
    window = (2, 16, 2, size, kernel, 1, kernel // 2, 1)
    data, weight = _int8_operands(window)
    expected = _reference(data, weight, 1, kernel // 2, 1, pad_value=3)
    sch = tvm.s_tir.Schedule(_int8_kernel(window))
    block = sch.get_sblock("conv")
    assert [int(loop.extent) for loop in map(sch.get, sch.get_loops(block)[2:4])] == list(computed)
    assert conv_amx.default_knobs(sch, block, 16) == default
    for knobs in [None, asdict(ConvTiles(rows, 1, 1, 1, 2)), asdict(ConvTiles(rows, 1, 1, 2, 2))]:
        np.testing.assert_array_equal(_run(_int8_kernel(window), program, [data, weight], expected, knobs), expected)


@pytest.mark.parametrize("program", PROGRAMS)
@pytest.mark.parametrize("window", [(2, 16, 2, 7, 3, 1, 1, 1), (2, 16, 2, 7, 1, 1, 0, 1), (1, 16, 2, 7, 3, 1, 2, 2)])
def test_tiles_run_over_whole_rows_of_a_stride_1_conv(window, program):
    """A 7 x 7 output's 2 rows in one tile of 16 pixels (a 3x3's tile reads on through the row's
    2 padding columns into the next row; their outputs are dropped), 4 rows in 2 tiles of 14,
    not a tile of 7 per row: every run in the knob space computes the conv, int8 exactly and bf16
    as the conv of the rounded operands; a dilated conv's rows are 4 padding columns apart."""
    data, weight = _int8_operands(window)
    *_, stride, pad, dilation = window
    expected = _reference(data, weight, stride, pad, dilation, pad_value=3)
    runs = [knobs for knobs in knob_space(_int8_kernel(window), 16) if knobs["width"]]
    chunks, block, out_chunks, size, kernel = window[:5]
    pitch = size + (kernel - 1) * dilation  # the input's row: the output's and its padding columns
    assert (2, pitch + size) in {(k["output_rows"], k["rows"] * k["row_tiles"]) for k in runs}
    for knobs in runs:
        np.testing.assert_array_equal(_run(_int8_kernel(window), program, [data, weight], expected, knobs), expected)
    rng = np.random.default_rng(0)
    floats = rng.standard_normal((1, chunks, size, size, block)).astype(np.float32)
    weight = bits_of(rng.standard_normal((out_chunks, chunks, kernel, kernel, block // 2, 16, 2)))
    expected = _reference(value_of(bits_of(floats)), value_of(weight), stride, pad, dilation)
    for knobs in runs[:2]:
        ours = _run(_bf16_kernel(window, True), program, [floats, weight], expected, knobs)
        np.testing.assert_allclose(ours, expected, rtol=0, atol=1e-5 * np.abs(expected).max())


def test_a_strided_conv_has_no_runs_of_tiles_over_rows():
    """Across a row's end, a strided conv's tile rows would not be one stride apart."""
    assert not any(knobs["width"] for knobs in knob_space(_int8_kernel(WINDOWS[2]), 16))


@pytest.mark.parametrize("program", PROGRAMS)
@pytest.mark.parametrize("window", [(2, 16, 3, 14, 1, 1, 0, 1), (1, 16, 3, 9, 3, 2, 1, 1)])
def test_a_conv_into_blocks_of_8_channels_runs_on_tiles_of_8_columns(window, program):
    """MobileNetV2's 24-channel outputs (3 blocks of 8), which ran on `vdpbf16ps` at 89 GFLOP/s:
    int8 exact, bf16 the conv of the rounded operands."""
    data, weight = _int8_operands(window, out_block=8)
    *_, stride, pad, dilation = window
    expected = _reference(data, weight, stride, pad, dilation, pad_value=3)
    np.testing.assert_array_equal(_run(_int8_kernel(window, out_block=8), program, [data, weight], expected),
                                  expected)
    chunks, block, out_chunks, size, kernel = window[:5]
    rng = np.random.default_rng(0)
    data = rng.standard_normal((1, chunks, size, size, block)).astype(np.float32)
    weight = bits_of(rng.standard_normal((out_chunks, chunks, kernel, kernel, block // 2, 8, 2)))
    expected = _reference(value_of(bits_of(data)), value_of(weight), stride, pad, dilation)
    ours = _run(_bf16_kernel(window, True, out_block=8), program, [data, weight], expected)
    np.testing.assert_allclose(ours, expected, rtol=0, atol=1e-5 * np.abs(expected).max())


@pytest.mark.parametrize("program", PROGRAMS)
@pytest.mark.parametrize("window", [(1, 32, 2, 8, 1, 1, 0, 1), (2, 32, 1, 9, 3, 2, 1, 1), (2, 32, 2, 1, 1, 1, 0, 1)])
def test_a_bf16_conv_into_blocks_of_32_channels_runs_two_c_tiles_per_block(window, program):
    """A bf16 AMX build's wide layout: an output block of 32 channels is two C tiles of 16,
    whose B tiles are its weight split into blocks of 16 (`split_output_blocks`); a map of one
    pixel too (a global pool's head: no vector kernel takes blocks of 32 in bf16)."""
    chunks, block, out_chunks, size, kernel, stride, pad, dilation = window
    rng = np.random.default_rng(0)
    data = rng.standard_normal((1, chunks, size, size, block)).astype(np.float32)
    wide = bits_of(rng.standard_normal((out_chunks, chunks, kernel, kernel, block // 2, 32, 2)))
    weight = split_output_blocks(wide, 16)
    x = te.placeholder(data.shape, "float32", name="data")
    w = te.placeholder(weight.shape, "uint16", name="weight")
    func = te.create_prim_func([x, w, conv2d_nchwc_bf16(x, w, (stride,) * 2, (pad,) * 4, (dilation,) * 2, amx=True,
                                                        out_block=32)])
    assert all(knobs["column_tiles"] % 2 == 0 for knobs in knob_space(func, 16))  # whole blocks of 32
    expected = _reference(value_of(bits_of(data)), value_of(wide), stride, pad, dilation)
    np.testing.assert_allclose(_run(func, program, [data, weight], expected), expected, rtol=0,
                               atol=1e-5 * np.abs(expected).max())


@pytest.mark.parametrize("window, blocks", [((4, 16, 32, 14, 1, 1, 0, 1), 2),  # 2 C blocks of 2 x 16 channels
                                           ((4, 16, 2, 14, 1, 1, 0, 1), 1)])  # 1: the tasks stay parallel
def test_a_conv_program_computes_several_c_blocks_in_turn_by_default(window, blocks):
    """One tile configuration for several C blocks: a load per block cost 9% of ResNet-50 bf16's
    kernels on the AMX host; int8 12% faster in one process with blocks."""
    sch = tvm.s_tir.Schedule(_int8_kernel(window))
    default = conv_amx.default_knobs(sch, sch.get_sblock("conv"), 16)
    assert default.blocks == blocks and default.column_tiles == 2


@pytest.mark.parametrize("program", PROGRAMS)
@pytest.mark.parametrize("threshold, outer, pad_outer", [(1 << 40, r"v_y_o = T.axis.spatial\(4, \w+ // 4\)",
                                                          r"v_i2 = T.axis.spatial\(10, \w+ // 20\)"),
                                                         (0, r"v_oc_o = T.axis.spatial\(4, \w+ // 4\)",
                                                          r"v_i1 = T.axis.spatial\(2, \w+ // 100\)")])
def test_a_conv_splits_its_rows_between_cores_unless_its_weights_are_large(threshold, outer, pad_outer, program,
                                                                          monkeypatch):
    """Weights up to `common.CHANNEL_SPLIT_WEIGHT_BYTES`: the tasks (and the padded input's pass) split
    the image's rows, outermost; above it, the output channels. Both compute the same conv."""
    monkeypatch.setattr(common, "CHANNEL_SPLIT_WEIGHT_BYTES", threshold)
    window = (2, 16, 8, 8, 3, 1, 1, 1)
    script = apply(_int8_kernel(window), 16).script()
    assert re.search(outer, script) and re.search(pad_outer, script)
    data, weight = _int8_operands(window)
    expected = _reference(data, weight, 1, 1, 1, pad_value=3)
    np.testing.assert_array_equal(_run(_int8_kernel(window), program, [data, weight], expected), expected)


@pytest.mark.parametrize("make, instruction, vector", [(_int8_kernel, "tdpbusd", "vpdpbusd"),
                                                       (lambda w: _bf16_kernel(w, False), "tdpbf16ps", "vdpbf16ps")])
def test_a_conv_for_an_amx_target_runs_tile_instructions(make, instruction, vector):
    kernel = tvm.compile(tvm.IRModule({"main": apply(make(WINDOWS[1]), 16)}), target=parse_target(SAPPHIRE_RAPIDS),
                         tir_pipeline=TIR_PIPELINE)
    assembly = kernel.mod.inspect_source("asm")
    assert re.search(rf"{instruction}\s+%tmm", assembly) and "ldtilecfg" in assembly and vector not in assembly


def test_an_int8_model_for_sapphire_rapids_runs_its_convs_on_tiles():
    model = tvm_fuse.build(residual_block(), SAPPHIRE_RAPIDS, quantize=QuantConfig(calibration=TABLE))
    assembly = model.assembly()
    assert re.search(r"tdpbusd\s+%tmm", assembly) and "vpdpbusd" not in assembly
    assert model.uses_amx


@pytest.mark.vnni
def test_an_int8_model_on_tiles_equals_its_vnni_build_exactly(monkeypatch):
    """Both sum the same integer products exactly, and share their epilogue."""
    x = np.random.default_rng(0).standard_normal((1, 32, 16, 16)).astype(np.float32)
    (vnni,) = tvm_fuse.build(residual_block(), VECTOR_HOST, quantize=QuantConfig(calibration=TABLE)).run(None, {"x": x})
    model = _amx_target_build(residual_block(), monkeypatch, quantize=QuantConfig(calibration=TABLE))
    assert not TILE_INSTRUCTION.search(model.assembly()) and "vpdpbusd" not in model.assembly()  # emulated tiles
    (tiles,) = model.run(None, {"x": x})
    np.testing.assert_array_equal(tiles, vnni)


@pytest.mark.bf16
def test_a_bf16_model_on_tiles_matches_its_vdpbf16ps_build(monkeypatch):
    x = np.random.default_rng(0).standard_normal((1, 32, 16, 16)).astype(np.float32)
    monkeypatch.setenv(WINOGRAD_SWITCH, "1")  # the vector build's 3x3 as a direct conv, as on tiles
    (vector,) = tvm_fuse.build(residual_block(), VECTOR_HOST, precision="bf16").run(None, {"x": x})
    model = _amx_target_build(residual_block(), monkeypatch, precision="bf16")
    assert "vdpbf16ps" not in model.assembly()  # every conv on (emulated) tiles
    (tiles,) = model.run(None, {"x": x})
    # The same rounded products, summed in another order.
    np.testing.assert_allclose(tiles, vector, rtol=0, atol=1e-5 * np.abs(vector).max())


def _mobile_block():
    """An RGB 1x1 stem 3->32 (too few channels for a tile row: a vector kernel), depthwise 3x3,
    1x1 32->64, max-pool, 3x3 64->64 + the pool's output, global average pool, 1x1 64->32 on
    its one pixel: all in blocks of 32 in a bf16 build for AMX."""
    rng = np.random.default_rng(5)

    def weight(name, *shape):
        return numpy_helper.from_array((rng.standard_normal(shape) / np.sqrt(np.prod(shape[1:]))).astype(np.float32),
                                       name)

    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], name="stem"),
             helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
             helper.make_node("Conv", ["r1", "w2"], ["c2"], name="depthwise", pads=[1] * 4, group=32),
             helper.make_node("Conv", ["c2", "w3"], ["c3"], name="expand"),
             helper.make_node("MaxPool", ["c3"], ["p"], name="pool", kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Conv", ["p", "w4"], ["c4"], name="spatial", pads=[1] * 4),
             helper.make_node("Add", ["c4", "p"], ["s"], name="residual"),
             helper.make_node("Relu", ["s"], ["r4"], name="relu4"),
             helper.make_node("GlobalAveragePool", ["r4"], ["g"], name="global"),
             helper.make_node("Conv", ["g", "w5"], ["y"], name="head")]
    graph = helper.make_graph(nodes, "mobile_block", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 32, 1, 1])],
                              [weight("w1", 32, 3, 1, 1), weight("w2", 32, 1, 3, 3), weight("w3", 64, 32, 1, 1),
                               weight("w4", 64, 64, 3, 3), weight("w5", 32, 64, 1, 1)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    return model


def _kernel_blocks(model) -> set[int]:
    """The channel blocks of the kernels' blocked (5-D) outputs in a bf16 build for AMX."""
    target = parse_target(SAPPHIRE_RAPIDS)
    optimized = optimize(relax_module(model).mod, target, bf16=bf16_pass("bf16", target))
    return {int(b.value.ty.shape[-1]) for block in optimized["main"].body.blocks for b in block.bindings
            if isinstance(b.value, tvm.relax.Call) and b.value.op.name == "relax.call_tir" and b.value.ty.ndim == 5}


@pytest.mark.parametrize("model, blocks", [(_mobile_block, {32}), (lambda: residual_block(channels=48), {16, 32})])
def test_a_bf16_build_for_amx_blocks_channels_by_32_where_they_allow(model, blocks):
    """A tile row holds 32 bf16 channels: in blocks of 16, every conv's input pass merged them in
    pairs. 48 channels take blocks of 16 (the 1x1's 96 outputs, 32)."""
    assert _kernel_blocks(model()) == blocks


@pytest.mark.bf16
def test_a_bf16_model_in_blocks_of_32_channels_matches_onnx_runtime(monkeypatch):
    """The vector kernels a wide build keeps (an RGB 1x1 stem in fp32, a depthwise conv, the
    pools) run on blocks of 32 too."""
    x = np.random.default_rng(0).standard_normal((1, 3, 16, 16)).astype(np.float32)
    model = _amx_target_build(_mobile_block(), monkeypatch, precision="bf16")
    assert "vdpbf16ps" not in model.assembly()  # its bf16 convs all on (emulated) tiles
    assert_close(model.run(None, {"x": x}), ort_outputs(_mobile_block(), {"x": x}), rtol=2e-2)


def _merged(data: np.ndarray, group: int) -> np.ndarray:
    """NCHW{c}c data with `group` neighbouring blocks side by side (`merge_channel_blocks`)."""
    n, chunks, h, w, block = data.shape
    return data.reshape(n, chunks // group, group, h, w, block).transpose(0, 1, 3, 4, 2, 5).reshape(
        n, chunks // group, h, w, group * block)


@pytest.mark.parametrize("program", PROGRAMS)
@pytest.mark.parametrize("kind, chunks, group", [("int8", 4, 4), ("int8", 6, 3), ("bf16", 4, 2)])
def test_a_conv_on_tiles_reads_neighbouring_input_blocks_as_one_tile_row(kind, chunks, group, program):
    """A 64-byte tile row holds 4 u8 blocks of 16 channels or 2 bf16 ones (`amx_input_blocks`):
    the weights merged as the data is, the same conv."""
    rng = np.random.default_rng(0)
    pack, dtype = (4, "uint8") if kind == "int8" else (2, "uint16")
    codes = rng.integers(-128, 128, (2, chunks, 3, 3, 16, 16)) if kind == "int8" else rng.standard_normal((2, chunks, 3, 3, 16, 16))
    pack_weight = pack_vnni if kind == "int8" else pack_pairs
    data = rng.integers(0, 256, (1, chunks, 6, 6, 16), dtype=np.uint8) if kind == "int8" \
        else bits_of(rng.standard_normal((1, chunks, 6, 6, 16)).astype(np.float32))
    weight = pack_weight(codes.astype(np.int8) if kind == "int8" else codes.astype(np.float32))
    merged = pack_weight(merge_input_blocks(codes.astype(np.int8) if kind == "int8" else codes.astype(np.float32), group))
    plain = (lambda x: x) if kind == "int8" else value_of
    expected = _reference(plain(data), plain(weight), 1, 1, 1)
    x = te.placeholder(data.shape, dtype, name="data")
    w = te.placeholder(merged.shape, merged.dtype, name="weight")
    out = conv2d_nchwc_int8(x, w, (1, 1), (1,) * 4, (1, 1), amx=True) if kind == "int8" \
        else conv2d_nchwc_bf16(x, w, (1, 1), (1,) * 4, (1, 1), amx=True)
    ours = _run(te.create_prim_func([x, w, out]), program, [data, merged], expected)
    np.testing.assert_allclose(ours, expected, rtol=0, atol=0 if kind == "int8" else 1e-5 * np.abs(expected).max())


@pytest.mark.parametrize("program", PROGRAMS)
@pytest.mark.parametrize("kind, block", [("int8", 4), ("bf16", 3)])
def test_a_stem_conv_on_tiles_reads_each_row_of_taps_as_one_tile_row(kind, block, program):
    """An image's channels x a 7x7 window at stride 2 (`fold_row_taps`): 7 taps of a row in one
    tile step, padding read as the zero point (int8) or zero (bf16); the same conv."""
    rng = np.random.default_rng(0)
    if kind == "int8":
        data = rng.integers(0, 256, (1, 1, 18, 18, block), dtype=np.uint8)
        codes = rng.integers(-128, 128, (1, 1, 7, 7, block, 16)).astype(np.int8)
        weight, folded, pad_value = pack_vnni(codes), pack_vnni(fold_weight_taps(codes)), 3
        plain, dtype = (lambda x: x), "uint8"
    else:
        data = rng.standard_normal((1, 1, 18, 18, block)).astype(np.float32)
        codes = rng.standard_normal((1, 1, 7, 7, block, 16)).astype(np.float32)
        weight, folded, pad_value = pack_pairs(codes), pack_pairs(fold_weight_taps(codes)), 0
        plain, dtype = value_of, "float32"
    reference_data = data if kind == "int8" else np.pad(value_of(bits_of(data)), [(0, 0)] * 4 + [(0, 1)])
    expected = _reference(reference_data, plain(weight), 2, 3, 1, pad_value=pad_value)
    x = te.placeholder(data.shape, dtype, name="data")
    w = te.placeholder(folded.shape, folded.dtype, name="weight")
    taps, *geometry = fold_row_taps(x, 7, (2, 2), (3,) * 4, (1, 1), pad_value=pad_value)
    out = conv2d_nchwc_int8(taps, w, *geometry, amx=True) if kind == "int8" \
        else conv2d_nchwc_bf16(taps, w, *geometry, amx=True)
    ours = _run(te.create_prim_func([x, w, out]), program, [data, folded], expected)
    np.testing.assert_allclose(ours, expected, rtol=0, atol=0 if kind == "int8" else 1e-5 * np.abs(expected).max())


def _stem(seed: int = 0):
    """An image's 3 channels -> 7x7 stride-2 conv of 16 + ReLU -> 1x1 conv of 32."""
    rng = np.random.default_rng(seed)
    weights = [numpy_helper.from_array((rng.standard_normal(shape) * 0.2).astype(np.float32), name)
               for name, shape in (("w1", (16, 3, 7, 7)), ("b1", (16,)), ("w2", (32, 16, 1, 1)), ("b2", (32,)))]
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="stem", strides=[2, 2], pads=[3, 3, 3, 3]),
             helper.make_node("Relu", ["c1"], ["a"], name="relu"),
             helper.make_node("Conv", ["a", "w2", "b2"], ["y"], name="head")]
    graph = helper.make_graph(nodes, "stem", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 32, 32])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 32, 16, 16])], weights)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    return model


@pytest.mark.parametrize("kind, instruction, vector", [("bf16", "tdpbf16ps", "vdpbf16ps"),
                                                       ("int8", "tdpbusd", "vpdpbusd")])
def test_a_stem_conv_for_sapphire_rapids_runs_on_tiles(kind, instruction, vector):
    x = np.random.default_rng(1).standard_normal((1, 3, 32, 32)).astype(np.float32)
    options = {"precision": "bf16"} if kind == "bf16" else {"quantize": QuantConfig(calibration=[{"x": x}])}
    assembly = tvm_fuse.build(_stem(), SAPPHIRE_RAPIDS, **options).assembly()
    assert re.search(rf"{instruction}\s+%tmm", assembly) and vector not in assembly


@pytest.mark.bf16
def test_a_bf16_stem_on_tiles_matches_onnx_runtime(monkeypatch):
    x = np.random.default_rng(1).standard_normal((1, 3, 32, 32)).astype(np.float32)
    model = _amx_target_build(_stem(), monkeypatch, precision="bf16")
    (ours,), (reference,) = model.run(None, {"x": x}), ort_outputs(_stem(), {"x": x})
    assert np.abs(ours - reference).max() <= 1e-2 * np.abs(reference).max()


@pytest.mark.vnni
def test_an_int8_stem_on_tiles_equals_its_vnni_build_exactly(monkeypatch):
    x = np.random.default_rng(1).standard_normal((1, 3, 32, 32)).astype(np.float32)
    table = QuantConfig(calibration=[{"x": x}])
    (vnni,) = tvm_fuse.build(_stem(), VECTOR_HOST, quantize=table).run(None, {"x": x})
    (tiles,) = _amx_target_build(_stem(), monkeypatch, quantize=table).run(None, {"x": x})
    np.testing.assert_array_equal(tiles, vnni)
