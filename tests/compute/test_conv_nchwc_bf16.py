"""The bf16 conv kernel computes the convolution of the bf16-rounded data and weights, summed in
fp32: on `vdpbf16ps` where the host has AVX512-BF16, and everywhere in the instruction's portable
form, which checks the kernel's packing and tensorization on any host."""

from __future__ import annotations

import numpy as np
import pytest
import tvm
from tvm import te

from tests.compute.conv_reference import conv2d
from tvm_fuse.compute.bf16 import bits_of, pack_pairs, value_of
from tvm_fuse.compute.conv_nchwc_bf16 import conv2d_nchwc_bf16
from tvm_fuse.ir_names import KNOBS_ATTR
from tvm_fuse.pipeline import TIR_PIPELINE
from tvm_fuse.schedules import apply
from tvm_fuse.target import parse_target


def _reference(data, weight, stride, pad):
    """NCHW x OIHW in float64 numpy, ReLU after."""
    return np.maximum(conv2d(data, weight, stride, pad), 0)


def test_rounding_to_bf16_is_to_nearest_even():
    # bf16 keeps 7 mantissa bits: 1 + 2^-8 is halfway between 1 and 1 + 2^-7 (ties go to the even 1),
    # 1 + 3 * 2^-8 halfway between 1 + 2^-7 and 1 + 2^-6 (to the even 1 + 2^-6).
    values = np.array([1.0, 1 + 2**-8, 1 + 3 * 2**-8, 1 + 2**-9, 1 + 2**-7 + 2**-9, -2.5], np.float32)
    assert value_of(bits_of(values)).tolist() == [1.0, 1.0, 1 + 2**-6, 1.0, 1 + 2**-7, -2.5]


@pytest.mark.parametrize("native", [pytest.param(True, marks=pytest.mark.bf16), False])
@pytest.mark.parametrize("channels, kernel, stride, pad, out_block, size, out_channels",
                         [(32, 3, 1, 1, 16, 10, 32), (16, 3, 2, 1, 16, 11, 32), (32, 1, 1, 0, 16, 14, 64),
                          (32, 1, 1, 0, 8, 10, 24),
                          (32, 1, 1, 0, 16, 29, 32), (16, 3, 2, 1, 16, 58, 32),  # rows of 29 computed to 30
                          (32, 1, 2, 0, 16, 15, 32), (1024, 1, 2, 0, 16, 5, 1024)])  # strided 1x1s, pixels gathered
def test_bf16_conv_equals_the_convolution_of_the_rounded_operands(native, channels, kernel, stride, pad,
                                                                   out_block, size, out_channels):
    rng = np.random.default_rng(0)
    block = 16
    data = rng.standard_normal((1, channels, size, size)).astype(np.float32)
    weight = rng.standard_normal((out_channels, channels, kernel, kernel)).astype(np.float32)
    blocked_data = data.reshape(1, channels // block, block, size, size).transpose(0, 1, 3, 4, 2)
    blocked_weight = weight.reshape(out_channels // out_block, out_block, channels // block, block, kernel, kernel)
    packed = pack_pairs(blocked_weight.transpose(0, 2, 4, 5, 3, 1))

    data_t = te.placeholder(blocked_data.shape, "float32", name="data")
    weight_t = te.placeholder(packed.shape, "uint16", name="weight")
    conv = conv2d_nchwc_bf16(data_t, weight_t, (stride, stride), (pad,) * 4, (1, 1), native)
    out_t = te.compute(conv.shape, lambda *i: te.max(conv[i], 0.0), name="relu")
    func = apply(te.create_prim_func([data_t, weight_t, out_t]), 16)
    assert func.attrs[KNOBS_ATTR] == "default"  # scheduled (tensorized) by its rule
    kernel_fn = tvm.compile(tvm.IRModule({"main": func}), target=parse_target("native"), tir_pipeline=TIR_PIPELINE)
    args = [tvm.runtime.tensor(np.ascontiguousarray(a)) for a in (blocked_data, packed)]
    out = tvm.runtime.tensor(np.zeros([int(d) for d in out_t.shape], np.float32))
    kernel_fn["main"](*args, out)
    ours = out.numpy().transpose(0, 1, 4, 2, 3).reshape(1, out_channels, *out.shape[2:4])
    expected = _reference(value_of(bits_of(data)), value_of(bits_of(weight)), stride, pad)
    # Exact products of 8-bit mantissas, summed in fp32 in another order: rounding only.
    np.testing.assert_allclose(ours, expected, rtol=0, atol=1e-5 * np.abs(expected).max())
    if not native:  # and the rounding matters: fp32 operands give another result
        assert np.abs(ours - _reference(data, weight, stride, pad)).max() > 1e-3 * np.abs(expected).max()


@pytest.mark.parametrize("channels, out_channels, gathered", [(256, 512, True), (1024, 1024, False)])
def test_a_strided_1x1_conv_reads_its_pixels_gathered_where_its_tasks_split_rows(channels, out_channels, gathered):
    # A bf16 pixel's block is half a cache line: strided, a tile's reads use half of each line
    # (ResNet-50's 56 -> 28 projection at 64% of the unit's peak, gathered 90%). Where the
    # weights are large enough that the tasks split channels, each group re-reads the input in
    # place instead, as before.
    data_t = te.placeholder((1, channels // 16, 14, 14, 16), "uint16", name="data")  # bf16 between kernels
    weight_t = te.placeholder((out_channels // 16, channels // 16, 1, 1, 8, 16, 2), "uint16", name="weight")
    conv = conv2d_nchwc_bf16(data_t, weight_t, (2, 2), (0,) * 4, (1, 1))
    func = apply(te.create_prim_func([data_t, weight_t, conv]), 16)
    assert ('T.sblock("strided")' in func.script()) == gathered
