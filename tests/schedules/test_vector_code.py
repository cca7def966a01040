"""The schedules emit the target's widest FMA vectors: zmm for AVX-512, ymm for AVX2. These tests
only compile and read the assembly, so they run on any host."""

from __future__ import annotations

import re

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import tvm_fuse
from tests.conftest import AVX512_TARGET, assert_close, ort_outputs
from tvm_fuse.benchmarking.peak import innermost_loops


def _model(kind: str):
    rng = np.random.default_rng(0)
    if kind == "wide_1x1_conv":  # PP-OCRv4 rec's 240-channel 1x1 over 12x80
        weight = numpy_helper.from_array(rng.standard_normal((240, 240, 1, 1)).astype(np.float32), "w")
        nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv")]
        x, y = [1, 240, 12, 80], [1, 240, 12, 80]
    elif kind == "large_conv":  # ResNet-50's last 3x3 convs, 2.4 MB of weights here
        weight = numpy_helper.from_array(rng.standard_normal((256, 256, 3, 3)).astype(np.float32), "w")
        nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1])]
        x, y = [1, 256, 7, 7], [1, 256, 7, 7]
    elif kind == "conv":
        weight = numpy_helper.from_array(rng.standard_normal((32, 16, 3, 3)).astype(np.float32), "w")
        nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1])]
        x, y = [1, 16, 32, 32], [1, 32, 32, 32]
    elif kind == "conv1d_long_row":  # an EEG net's dilated conv1d, its row no multiple of a vector
        weight = numpy_helper.from_array(rng.standard_normal((32, 32, 3)).astype(np.float32), "w")
        nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", dilations=[2])]
        x, y = [1, 32, 154], [1, 32, 150]
    elif kind == "conv_column":  # magika's conv over a 1-wide column (NHWC, from TensorFlow)
        weight = numpy_helper.from_array(rng.standard_normal((64, 32, 5, 1)).astype(np.float32), "w")
        nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv")]
        x, y = [1, 32, 100, 1], [1, 64, 96, 1]
    elif kind == "narrow_dense":  # a tagger's per-token head: 5 classes, fewer than a vector
        weight = numpy_helper.from_array(rng.standard_normal((200, 5)).astype(np.float32), "w")
        nodes = [helper.make_node("MatMul", ["x", "w"], ["c"], name="dense")]
        x, y = [640, 200], [640, 5]
    elif kind.startswith("token_dense"):  # MiniLM's attention output projection: 128 tokens x 384
        weight = numpy_helper.from_array(rng.standard_normal((384, 384)).astype(np.float32), "w")
        nodes = [helper.make_node("MatMul", ["x", "w"], ["c"], name="dense")]
        tokens = "tokens" if kind.endswith("any_length") else 128
        x, y = [1, tokens, 384], [1, tokens, 384]
    else:
        weight = numpy_helper.from_array(rng.standard_normal((64, 64)).astype(np.float32), "w")
        nodes = [helper.make_node("MatMul", ["x", "w"], ["c"], name="dense")]
        x, y = [4, 64], [4, 64]
    nodes.append(helper.make_node("Relu", ["c"], ["y"], name="relu"))
    graph = helper.make_graph(nodes, kind, [helper.make_tensor_value_info("x", TensorProto.FLOAT, x)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, y)], [weight])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    return model


def _fma_registers(text: str) -> set[str]:
    """The register classes FMA instructions use: xmm, ymm or zmm."""
    return {kind for line in text.splitlines() if "vfmadd" in line for kind in re.findall(r"%([xyz]mm)\d", line)}


@pytest.mark.parametrize("kind", ["conv", "dense"])
def test_avx512_kernels_use_zmm_fmas(kind):
    assert "zmm" in _fma_registers(tvm_fuse.build(_model(kind), AVX512_TARGET).assembly())


@pytest.mark.parametrize("kind", ["conv", "dense"])
def test_avx2_kernels_use_ymm_fmas_and_no_zmm(kind):
    text = tvm_fuse.build(_model(kind), "llvm -mcpu=haswell").assembly()
    assert "ymm" in _fma_registers(text)
    assert "zmm" not in text


def test_avx2_conv_tile_stays_in_registers():
    # AVX2 has 16 ymm registers: a tile of the AVX-512 size (up to 28 accumulators) spilled
    # (53 stack moves here) and ran 1.3-1.9x slower; the budgeted tile spills none of them.
    text = tvm_fuse.build(_model("wide_1x1_conv"), "llvm -mcpu=haswell").assembly()
    stack_moves = [line for line in text.splitlines() if re.search(r"%ymm\d+, -?\d*\(%rsp\)|\(%rsp\), %ymm", line)]
    modules = text.count('.file\t"TVMMod"')  # the kernel modules, one per core that compiled them
    assert len(stack_moves) <= modules, stack_moves[:8]  # one a module zeroes an error path's call arguments


@pytest.mark.parametrize("target, accumulators", [(AVX512_TARGET, 24), ("llvm -mcpu=haswell", 8)])
def test_a_token_dense_layer_accumulates_its_whole_tile_in_registers(target, accumulators):
    # Tiles of 8 rows x 3 vectors on AVX-512 (8 x 2 before: MiniLM's dense layers took 1-3%
    # longer), 8 x 1 within AVX2's 12; the hot loop's FMAs each add into their own register,
    # with no spill: a spilled accumulator would cost a load and a store per FMA.
    text = tvm_fuse.build(_model("token_dense"), target).assembly()
    loop = max(innermost_loops(text), key=lambda lines: sum("vfmadd" in line for line in lines))
    fmas = [line for line in loop if line.startswith("vfmadd")]
    assert len({fma.split(",")[-1].strip() for fma in fmas}) == len(fmas) == accumulators, loop
    assert not any("(%rsp)" in line for line in loop), loop


@pytest.mark.parametrize("kind, prefetches", [("token_dense", 1), ("token_dense_any_length", 1), ("dense", 0),
                                               ("large_conv", 1), ("conv", 0)])
def test_layers_with_large_weights_prefetch_the_next_strip_one_line_a_step(kind, prefetches):
    # 128 tokens are 16 tiles of a strip, each prefetching its share of the next strip's
    # weights, a line a step (MiniLM's dense kernels took 3-13% less time), and so do the
    # tiles of a run-time token count; 4 rows are one tile, with no others to share the
    # strip, so it prefetches nothing. A conv whose weights are split between the cores
    # (over 1 MB) runs a group of output channels row by row, and the rows prefetch the next
    # group's weights; a conv with small weights keeps them in L2 and prefetches nothing.
    text = tvm_fuse.build(_model(kind), AVX512_TARGET).assembly()
    loop = max(innermost_loops(text), key=lambda lines: sum("vfmadd" in line for line in lines))
    assert sum(line.startswith("prefetcht1") for line in loop) == prefetches, loop


@pytest.mark.parametrize("kind, accumulators", [("conv1d_long_row", 16), ("conv_column", 24), ("narrow_dense", 8)])
def test_narrow_or_ragged_products_keep_a_full_register_tile(kind, accumulators):
    # A row of 150 is computed to 160 (whole vectors) and cropped, so its tile is 8 channels x
    # 2 vectors instead of 4 channels x 4 lanes of an xmm; a 1-wide column's tile takes 6 of its
    # rows; 5 output columns are computed as a whole vector (the packed weight padded with
    # zeros) for 8 rows. Each hot loop's FMAs add into that many zmm registers, none spilled.
    text = tvm_fuse.build(_model(kind), AVX512_TARGET).assembly()
    loop = max(innermost_loops(text), key=lambda lines: sum("vfmadd" in line for line in lines))
    fmas = [line for line in loop if line.startswith("vfmadd")]
    assert all("zmm" in fma for fma in fmas), loop
    assert len({fma.split(",")[-1].strip() for fma in fmas}) == accumulators, loop  # taps may be unrolled
    assert not any("(%rsp)" in line for line in loop), loop


def test_a_rounded_row_stores_its_epilogue_in_whole_vectors():
    # The row of 150 is computed to 160 and cropped as it is stored: only the last tile
    # crosses the edge, so every other tile's ReLU runs on zmm vectors (a guard on each store
    # made TVM's vectorizer leave the whole epilogue scalar, which LLVM redid in ymm and xmm).
    text = tvm_fuse.build(_model("conv1d_long_row"), AVX512_TARGET).assembly()
    assert any(line.split()[:1] == ["vmaxps"] and "zmm" in line for line in text.splitlines())


@pytest.mark.avx512
@pytest.mark.parametrize("kind", ["conv1d_long_row", "conv_column", "narrow_dense"])
def test_narrow_or_ragged_products_match_onnxruntime(kind):
    model = _model(kind)
    x = {"x": np.random.default_rng(1).standard_normal(
        [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]).astype(np.float32)}
    assert_close(tvm_fuse.build(model, AVX512_TARGET).run(None, x), ort_outputs(model, x))
