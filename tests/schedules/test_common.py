"""Shared schedule rules (`schedules.common`): which way a conv's parallel tasks split between
the cores (`splits_channels`), for the fp32 and dot-product convs (the AMX conv's own test is
in `amx/test_conv.py`), and the depthwise convs' rows."""

from __future__ import annotations

import re

import numpy as np
import pytest
from tvm import te

import tvm_fuse
from tests.conftest import assert_close, ort_outputs
from tests.quantization.models import residual_block
from tests.schedules.amx.test_conv import VECTOR_HOST
from tvm_fuse import QuantConfig
from tvm_fuse.compute.conv_nchwc import conv2d_nchwc, depthwise_conv2d_nchwc
from tvm_fuse.compute.conv_nchwc_int8 import conv2d_nchwc_int8
from tvm_fuse.schedules import apply, common

# (threshold, the loop the task index divides first: rows, or output channel blocks)
SPLITS = [(1 << 40, r"v_y = T.axis.spatial\(8, \w+_fused // 2( \+ \w+)?\)"),  # + a row tile's row
          (0, r"v_oc = T.axis.spatial\(4, \w+_fused // 8 \* 2")]  # 2 output blocks per tile


def _fp32_conv():
    data = te.placeholder((1, 2, 8, 8, 16), name="data")
    weight = te.placeholder((4, 2, 3, 3, 16, 16), name="weight")
    return te.create_prim_func([data, weight, conv2d_nchwc(data, weight, (1, 1), (1, 1, 1, 1), (1, 1))])


def _int8_conv():
    data = te.placeholder((1, 2, 8, 8, 16), "uint8", name="data")
    weight = te.placeholder((4, 2, 3, 3, 4, 16, 4), "int8", name="weight")
    return te.create_prim_func([data, weight, conv2d_nchwc_int8(data, weight, (1, 1), (1, 1, 1, 1), (1, 1), 0, True)])


@pytest.mark.parametrize("make", [_fp32_conv, _int8_conv])
@pytest.mark.parametrize("threshold, outer", SPLITS)
def test_a_conv_splits_its_rows_between_cores_unless_its_weights_are_large(make, threshold, outer, monkeypatch):
    """Weights up to `CHANNEL_SPLIT_WEIGHT_BYTES`: the tasks split the output rows outermost
    (each core's rows stay in its L2 for the next conv); above it, the output channels."""
    monkeypatch.setattr(common, "CHANNEL_SPLIT_WEIGHT_BYTES", threshold)
    script = apply(make(), 16).script()
    assert re.search(outer, script), script


def test_a_depthwise_conv_splits_its_rows_between_cores():
    """Its weights are a few KB: rows outermost, as `splits_channels` splits a small conv."""
    data = te.placeholder((1, 4, 8, 8, 16), name="data")
    weight = te.placeholder((4, 1, 3, 3, 1, 16), name="weight")
    func = te.create_prim_func([data, weight, depthwise_conv2d_nchwc(data, weight, (1, 1), (1, 1, 1, 1), (1, 1))])
    script = apply(func, 16).script()
    assert re.search(r"v_y = T.axis.spatial\(8, \w+_fused // 4\)", script), script


@pytest.mark.parametrize("threshold", [0, 1 << 40])
def test_an_fp32_model_matches_onnx_runtime_whichever_way_its_convs_split(threshold, monkeypatch):
    monkeypatch.setattr(common, "CHANNEL_SPLIT_WEIGHT_BYTES", threshold)
    model, feed = _residual_block()
    assert_close(tvm_fuse.build(model, target=VECTOR_HOST).run(None, feed), ort_outputs(model, feed))


@pytest.mark.vnni
def test_a_vnni_int8_model_is_the_same_whichever_way_its_convs_split(monkeypatch):
    """Both splits of the dot-product convs and their input passes, bit for bit."""
    model, feed = _residual_block()
    outputs = []
    for threshold in (0, 1 << 40):
        monkeypatch.setattr(common, "CHANNEL_SPLIT_WEIGHT_BYTES", threshold)
        built = tvm_fuse.build(model, target=VECTOR_HOST, quantize=QuantConfig(calibration=[feed]))
        outputs.append(built.run(None, feed)[0])
    np.testing.assert_array_equal(*outputs)


def _residual_block():
    feed = {"x": np.random.default_rng(1).standard_normal((1, 32, 16, 16)).astype(np.float32)}
    return residual_block(channels=32, size=16), feed
