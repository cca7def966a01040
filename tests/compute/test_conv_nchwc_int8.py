"""The int8 conv kernel computes exactly the integer convolution, padding with the zero point."""

from __future__ import annotations

import numpy as np
import pytest
import tvm
from tvm import s_tir, te

from tests.compute.conv_reference import conv2d
from tvm_fuse.compute.conv_nchwc_int8 import conv2d_nchwc_int8
from tvm_fuse.ir_names import KNOBS_ATTR
from tvm_fuse.pipeline import TIR_PIPELINE
from tvm_fuse.quantization.weights import pack_vnni
from tvm_fuse.schedules import apply
from tvm_fuse.schedules.common import anchor_block
from tvm_fuse.schedules.conv_nchwc_dot import default_knobs

TARGETS = {True: "cascadelake", False: "skylake-avx512"}


@pytest.mark.parametrize("vnni", [pytest.param(True, marks=pytest.mark.vnni),
                                  pytest.param(False, marks=pytest.mark.avx512)])
@pytest.mark.parametrize("channels, kernel, stride, pad, zero_point, out_block, size, out_channels, tile",
                         [(32, 3, 1, 1, 0, 16, 10, 32, None), (16, 3, 2, 1, 128, 16, 10, 32, None),
                          (32, 1, 1, 0, 7, 16, 10, 32, None), (32, 1, 1, 0, 7, 8, 10, 32, None),
                          (16, 3, 1, 1, 3, 8, 10, 32, None),
                          (512, 1, 1, 0, 0, 16, 28, 64, (14, 2)),  # 32 KB of weights per 4 x 4 tile
                          (128, 3, 2, 1, 0, 16, 56, 64, (14, 2)),  # strided
                          (64, 3, 1, 1, 0, 16, 28, 64, (4, 4)),  # stride 1: rows shared by taps
                          (32, 1, 1, 0, 7, 16, 29, 32, (10, 2)),  # rows of 29 computed to 30
                          (16, 3, 2, 1, 128, 16, 58, 32, (10, 2))])
def test_int8_conv_is_exact(vnni, channels, kernel, stride, pad, zero_point, out_block, size, out_channels, tile):
    """Output channels in blocks of 16 (zmm accumulators) or of 8 (ymm, as 24-channel layers);
    `tile`: the default register tile (width x channel blocks) expected, where it matters."""
    rng = np.random.default_rng(0)
    block = 16
    limit = 127 if vnni else 63  # without VNNI, 7-bit weights keep vpmaddubsw's int16 sums exact
    data = rng.integers(0, 256, (1, channels, size, size), dtype=np.uint8)
    weight = rng.integers(-limit, limit + 1, (out_channels, channels, kernel, kernel), dtype=np.int8)
    blocked_data = data.reshape(1, channels // block, block, size, size).transpose(0, 1, 3, 4, 2)
    blocked_weight = weight.reshape(out_channels // out_block, out_block, channels // block, block, kernel, kernel)
    packed = pack_vnni(blocked_weight.transpose(0, 2, 4, 5, 3, 1))

    data_t = te.placeholder(blocked_data.shape, "uint8", name="data")
    weight_t = te.placeholder(packed.shape, "int8", name="weight")
    out_t = conv2d_nchwc_int8(data_t, weight_t, (stride, stride), (pad,) * 4, (1, 1), zero_point, vnni)
    func = apply(te.create_prim_func([data_t, weight_t, out_t]), 16)
    if tile is not None:
        sch = s_tir.Schedule(te.create_prim_func([data_t, weight_t, out_t]))
        knobs = default_knobs(sch, anchor_block(sch)[0], 16)
        assert (knobs.width_tile, knobs.channel_tile) == tile
    assert func.attrs[KNOBS_ATTR] == "default"  # scheduled (tensorized) by its rule
    target = tvm.target.Target({"kind": "llvm", "mcpu": TARGETS[vnni]})
    kernel_fn = tvm.compile(tvm.IRModule({"main": func}), target=target, tir_pipeline=TIR_PIPELINE)
    args = [tvm.runtime.tensor(np.ascontiguousarray(a)) for a in (blocked_data, packed)]
    out = tvm.runtime.tensor(np.zeros([int(d) for d in out_t.shape], np.int32))
    kernel_fn["main"](*args, out)
    ours = out.numpy().transpose(0, 1, 4, 2, 3).reshape(1, out_channels, *out.shape[2:4])
    assert out.shape[-1] == out_block
    np.testing.assert_array_equal(ours, conv2d(data, weight, stride, pad, zero_point))
