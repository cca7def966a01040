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
from tests.quantization.models import residual_block, symbolic_cnn
from tests.schedules.amx.test_conv import VECTOR_HOST
from tvm_fuse import QuantConfig
from tvm_fuse.compute.conv_nchwc import conv2d_nchwc, depthwise_conv2d_nchwc
from tvm_fuse.compute.conv_nchwc_int8 import conv2d_nchwc_int8
from tvm_fuse.schedules import apply, common, conv_nchwc

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


# Each precision's build, and its tolerance (of each output's largest magnitude) against fp32.
SYMBOLIC_PRECISIONS = [pytest.param("fp32", 1e-4), pytest.param("bf16", 3e-2, marks=pytest.mark.bf16),
                       pytest.param("int8", 3e-2, marks=pytest.mark.vnni)]


@pytest.mark.parametrize("precision, rtol", SYMBOLIC_PRECISIONS)
def test_convs_over_a_symbolic_batch_rows_and_columns_match_onnx_runtime_at_every_size(precision, rtol):
    """One build serves every size. Task loops fused from a symbolic batch and row count lost
    the register tile's bounds in TVM (SegFormer exported with dynamic axes: its tile stored
    out of bounds, corrupting memory; a 3x3/2 conv of 64 channels failed to build); a bf16
    depthwise conv failed on the dims passed beside its tensors."""
    model = symbolic_cnn()
    rng = np.random.default_rng(4)
    feeds = [{"x": rng.standard_normal(shape).astype(np.float32)}
             for shape in [(1, 64, 32, 32), (2, 64, 17, 23), (1, 64, 96, 64)]]
    if precision == "int8":
        compiled = tvm_fuse.build(model, target=VECTOR_HOST, quantize=QuantConfig(calibration=feeds[:1]))
    else:
        compiled = tvm_fuse.build(model, target=VECTOR_HOST, precision=precision)
    for feed in feeds:
        assert_close(compiled.run(None, feed), ort_outputs(model, feed), rtol)


def test_a_schedule_whose_register_tile_lost_its_bounds_is_not_applied(monkeypatch):
    """The net under the schedules: a kernel whose tile TVM sizes as the whole output (task
    loops fused from two symbolic extents, as the conv's were) is left unscheduled, correct."""
    def fuse_all(sch, tasks):
        loop = sch.fuse(*tasks)
        sch.parallel(loop)
        return loop

    monkeypatch.setattr(conv_nchwc, "parallel_tasks", fuse_all)
    batch, rows = te.var("n", "int64"), te.var("h", "int64")
    data = te.placeholder((batch, 4, rows, 8, 16), name="data")
    weight = te.placeholder((8, 4, 3, 3, 16, 16), name="weight")
    func = te.create_prim_func([data, weight, conv2d_nchwc(data, weight, (2, 2), (1, 1, 1, 1), (1, 1))])
    with pytest.warns(UserWarning, match="local buffers of symbolic size: conv_local"):
        assert apply(func, 16).same_as(func)
    monkeypatch.undo()
    common.check_tiles_bounded(apply(func, 16))  # the schedule as it is keeps its tile
