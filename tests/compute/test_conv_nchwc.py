"""The fp32 NCHW{c}c conv: a wide output row that no register tile divides is computed rounded up
to one that does and cropped, with the same results."""

from __future__ import annotations

import numpy as np
import pytest
import tvm
from tvm import s_tir, te

from tests.compute.conv_reference import conv2d
from tvm_fuse.compute.conv import tileable_output
from tvm_fuse.compute.conv_nchwc import conv2d_nchwc
from tvm_fuse.pipeline import TIR_PIPELINE
from tvm_fuse.schedules import apply
from tvm_fuse.schedules.common import anchor_block
from tvm_fuse.schedules.conv_nchwc import default_knobs
from tvm_fuse.target import parse_target


@pytest.mark.parametrize("width, computed", [(38, 40), (111, 112), (29, 30), (56, 56), (27, 27), (7, 7)])
def test_a_wide_row_no_tile_divides_is_rounded_up_to_one_that_does(width, computed):
    assert tileable_output((5, width)) == (5, computed)


def test_a_symbolic_width_is_left_alone():
    width = tvm.tirx.Var("w", "int64")
    assert tileable_output((5, width))[1] is width


@pytest.mark.parametrize("kernel, stride, pad, size, tile",
                         [(1, 1, 0, 38, (5, 4)),  # 1x1 unpadded: the extra pixels read the last column
                          (3, 2, 1, 58, (6, 4))])  # out 29 -> 30, padded
def test_a_rounded_conv_equals_the_convolution(kernel, stride, pad, size, tile):
    rng = np.random.default_rng(0)
    channels, out_channels, block = 32, 64, 16
    data = rng.standard_normal((1, channels, 3, size)).astype(np.float32)
    weight = rng.standard_normal((out_channels, channels, kernel, kernel)).astype(np.float32)
    blocked_data = data.reshape(1, channels // block, block, 3, size).transpose(0, 1, 3, 4, 2)
    blocked_weight = weight.reshape(out_channels // block, block, channels // block, block, kernel, kernel)
    packed = np.ascontiguousarray(blocked_weight.transpose(0, 2, 4, 5, 3, 1))

    data_t = te.placeholder(blocked_data.shape, "float32", name="data")
    weight_t = te.placeholder(packed.shape, "float32", name="weight")
    out_t = conv2d_nchwc(data_t, weight_t, (stride, stride), (pad,) * 4, (1, 1))
    sch = s_tir.Schedule(te.create_prim_func([data_t, weight_t, out_t]))
    block_rv, _ = anchor_block(sch)
    knobs = default_knobs(sch, block_rv, 16)
    assert (knobs.width_tile, knobs.channel_tile) == tile  # 38 or 29 alone: tiles of 2 or 1 pixels

    func = apply(te.create_prim_func([data_t, weight_t, out_t]), 16)
    kernel_fn = tvm.compile(tvm.IRModule({"main": func}), target=parse_target("llvm"), tir_pipeline=TIR_PIPELINE)
    out = tvm.runtime.tensor(np.zeros([int(d) for d in out_t.shape], np.float32))
    kernel_fn["main"](*(tvm.runtime.tensor(a) for a in (np.ascontiguousarray(blocked_data), packed)), out)
    ours = out.numpy().transpose(0, 1, 4, 2, 3).reshape(1, out_channels, *out.shape[2:4])

    reference = conv2d(data, weight, stride, pad)
    np.testing.assert_allclose(ours, reference, rtol=1e-4, atol=1e-4 * np.abs(reference).max())
