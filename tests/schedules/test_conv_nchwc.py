"""The fp32 NCHW{c}c convs' schedules (`schedules.conv_nchwc`): the default register tiles of a
conv of an odd count of output blocks and of a depthwise conv."""

from __future__ import annotations

import numpy as np
import pytest
from tvm import s_tir, te

import tvm_fuse
from tests.conftest import assert_close, conv_model, ort_outputs
from tests.schedules.amx.test_conv import VECTOR_HOST
from tvm_fuse.compute.conv_nchwc import conv2d_nchwc, depthwise_conv2d_nchwc
from tvm_fuse.schedules.common import anchor_block
from tvm_fuse.schedules.conv_nchwc import DepthwiseNCHWcKnobs, default_depthwise_knobs, default_register_tile


@pytest.mark.parametrize("out_blocks, width, tile", [(3, 160, (8, 3)), (9, 56, (8, 3)), (6, 160, (10, 2)), (9, 14, (14, 1))])
def test_an_odd_count_of_output_blocks_is_taken_three_at_a_time(out_blocks, width, tile):
    # One block a tile feeds each broadcast input to a single FMA: PP-OCRv6's 48 -> 24 channel
    # stride-2 3x3 (3 blocks of 8) 4.4 -> 3.7 ms in 8 x 3 tiles (Zen 4, 2 threads).
    data = te.placeholder((1, 3, width + 2, width + 2, 16), name="data")
    weight = te.placeholder((out_blocks, 3, 3, 3, 16, 8), name="weight")
    func = te.create_prim_func([data, weight, conv2d_nchwc(data, weight, (1, 1), (0, 0, 0, 0), (1, 1))])
    sch = s_tir.Schedule(func)
    block, _ = anchor_block(sch)
    assert default_register_tile(sch, block, 16) == tile


def test_a_conv_of_three_output_blocks_matches_onnx_runtime():
    model = conv_model((1, 48, 30, 40), 24, kernel=3, stride=2, relu=False)
    feed = {"x": np.random.default_rng(1).standard_normal((1, 48, 30, 40)).astype(np.float32)}
    assert_close(tvm_fuse.build(model, target=VECTOR_HOST, tuning_logs=[]).run(None, feed), ort_outputs(model, feed))


@pytest.mark.parametrize("width, tile", [(16, 4), (10, 2), (7, 1)])
def test_a_depthwise_conv_runs_a_few_pixels_a_tile_with_its_taps_unrolled(width, tile):
    # Neighbouring taps of a tile share their input loads: 1.1-2.4x less time than one pixel
    # a tile on 3x3 to 7x7 kernels (Zen 4).
    data = te.placeholder((1, 2, 9, width + 4, 16), name="data")
    weight = te.placeholder((2, 1, 5, 5, 1, 16), name="weight")
    func = te.create_prim_func([data, weight, depthwise_conv2d_nchwc(data, weight, (1, 1), (0, 0, 0, 0), (1, 1))])
    sch = s_tir.Schedule(func)
    block, _ = anchor_block(sch)
    assert default_depthwise_knobs(sch, block, 16) == DepthwiseNCHWcKnobs(tile, unroll_taps=True, inline_padding=True)


@pytest.mark.parametrize("kernel, stride, width", [(3, 1, 16), (3, 2, 15), (5, 1, 10), (7, 1, 12), (5, 2, 13)])
def test_a_depthwise_conv_in_its_default_tiles_matches_onnx_runtime(kernel, stride, width):
    model = conv_model((1, 32, 11, width), 32, kernel, stride, group=32)
    feed = {"x": np.random.default_rng(1).standard_normal((1, 32, 11, width)).astype(np.float32)}
    built = tvm_fuse.build(model, target=VECTOR_HOST, tuning_logs=[])
    assert_close(built.run(None, feed), ort_outputs(model, feed))
