"""RealizeBf16 (`build(precision="bf16")`): the blocked convs it takes run on `vdpbf16ps` kernels,
the others stay fp32, and the build says so; targets without AVX512-BF16 build in fp32."""

from __future__ import annotations

import functools

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import tvm_fuse
from tests.conftest import assert_close, ort_outputs
from tvm_fuse.errors import InputError
from tvm_fuse.fusion_report import FusionReport
from tvm_fuse.target import host_cpu, vector_lanes
from tvm_fuse.transform.realize.bf16 import RealizeBf16

BF16_TARGET = "llvm -mcpu=znver4 -num-cores=2"  # AVX512-BF16 without AMX


def _weight(rng, name, *shape):
    values = rng.standard_normal(shape) / np.sqrt(np.prod(shape[1:]))
    return numpy_helper.from_array(values.astype(np.float32), name)


@pytest.fixture
def portable(monkeypatch):
    """bf16 builds with `vdpbf16ps` replaced by its portable form, on this host's vector width:
    the target to build for, AMX off (a host without AVX512-BF16 has no AMX either)."""
    monkeypatch.setattr("tvm_fuse.api.bf16_pass", lambda precision, target:
                        RealizeBf16(vector_lanes(target), native=False) if precision == "bf16" else None)
    return f"llvm -mcpu={host_cpu()} -mattr=-amx-tile,-amx-int8,-amx-bf16"


def _model():
    """1x1 conv 16->32 + ReLU, depthwise 3x3 + ReLU, 3x3 stride-2 conv 32->32 + residual-free bias."""
    rng = np.random.default_rng(0)

    weight = functools.partial(_weight, rng)

    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c1"], name="pointwise"),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("Conv", ["r1", "wd"], ["c2"], name="depthwise", group=32, pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c2"], ["r2"], name="relu2"),
        helper.make_node("Conv", ["r2", "w3", "b3"], ["y"], name="strided", strides=[2, 2], pads=[1, 1, 1, 1]),
    ]
    graph = helper.make_graph(
        nodes, "bf16", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 28, 28])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 32, 14, 14])],
        [weight("w1", 32, 16, 1, 1), weight("wd", 32, 1, 3, 3), weight("w3", 32, 32, 3, 3),
         numpy_helper.from_array(rng.standard_normal(32).astype(np.float32), "b3")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    return model


def _precisions(model) -> dict[str, str]:
    return {node: k["precision"] for k in model.fusion_report()["kernels"] for node in k["onnx_nodes"]}


def test_convs_run_on_vdpbf16ps_and_depthwise_stays_fp32():
    model = tvm_fuse.build(_model(), BF16_TARGET, precision="bf16")
    assert model.precision == "bf16"
    precisions = _precisions(model)
    assert (precisions["pointwise"], precisions["strided"], precisions["depthwise"]) == ("bf16", "bf16", "fp32")
    assert "vdpbf16ps" in model.assembly()
    assert "2 of the fused kernels run in bf16" in FusionReport.from_json(model.fusion_report()).summary()


def test_fp32_is_the_default_and_has_no_bf16_instruction():
    model = tvm_fuse.build(_model(), BF16_TARGET)
    assert model.precision == "fp32" and set(_precisions(model).values()) == {"fp32"}
    assert "vdpbf16ps" not in model.assembly()


def test_a_target_without_avx512_bf16_builds_in_fp32_with_a_warning():
    with pytest.warns(UserWarning, match="need AVX512-BF16"):
        model = tvm_fuse.build(_model(), "llvm -mcpu=cascadelake", precision="bf16")
    assert model.precision == "fp32" and "vdpbf16ps" not in model.assembly()


def test_an_unknown_precision_is_refused():
    with pytest.raises(InputError, match="precision must be one of fp32, bf16"):
        tvm_fuse.build(_model(), BF16_TARGET, precision="fp16")


def test_export_and_load_keep_the_precision(tmp_path):
    model = tvm_fuse.build(_model(), BF16_TARGET, precision="bf16")
    loaded = tvm_fuse.load(model.export(tmp_path / "bf16.so"))
    assert loaded.precision == "bf16" and _precisions(loaded) == _precisions(model)


@pytest.mark.bf16
def test_bf16_build_matches_onnx_runtime_within_bf16_rounding():
    model = _model()
    feed = {"x": np.random.default_rng(1).standard_normal((1, 16, 28, 28)).astype(np.float32)}
    ours = tvm_fuse.build(model, "native", precision="bf16")
    assert ours.precision == "bf16"
    # Operands rounded to 8 significant bits, two layers deep: about 2^-8 of the output's scale.
    assert_close(ours.run(None, feed), ort_outputs(model, feed), rtol=2e-2)


def test_bf16_build_in_the_portable_form_matches_onnx_runtime_on_any_host(portable):
    """The whole build (weights packed, data rounded as padded, epilogues in fp32) with
    `vdpbf16ps` replaced by its portable form, on this host's vector width."""
    model = _model()
    feed = {"x": np.random.default_rng(1).standard_normal((1, 16, 28, 28)).astype(np.float32)}
    ours = tvm_fuse.build(model, portable, precision="bf16")
    assert set(_precisions(ours).values()) == {"bf16", "fp32"}
    reference = ort_outputs(model, feed)
    assert_close(ours.run(None, feed), reference, rtol=2e-2)
    # and bf16 rounding is really there: fp32 kernels land much closer
    (bf16_out,), (fp32_out,) = ours.run(None, feed), tvm_fuse.build(model, portable).run(None, feed)
    assert np.abs(bf16_out - reference[0]).max() > 10 * np.abs(fp32_out - reference[0]).max()


def _residual_model():
    """A bottleneck: 1x1 conv 16->32 + ReLU, 3x3 conv 32->32 + ReLU, 1x1 conv 32->32 + the first
    ReLU's output + ReLU, then a global average pool. The first kernel's only readers are the
    second's data and the third's residual add; the second's, the third's data."""
    rng = np.random.default_rng(2)

    weight = functools.partial(_weight, rng)

    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c1"], name="reduce"),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("Conv", ["r1", "w2"], ["c2"], name="spatial", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c2"], ["r2"], name="relu2"),
        helper.make_node("Conv", ["r2", "w3"], ["c3"], name="expand"),
        helper.make_node("Add", ["c3", "r1"], ["s"], name="residual"),
        helper.make_node("Relu", ["s"], ["r3"], name="relu3"),
        helper.make_node("GlobalAveragePool", ["r3"], ["y"], name="pool"),
    ]
    graph = helper.make_graph(
        nodes, "bf16_chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 14, 14])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 32, 1, 1])],
        [weight("w1", 32, 16, 1, 1), weight("w2", 32, 32, 3, 3), weight("w3", 32, 32, 1, 1)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    return model


def _kernel_dtypes(model, target: str, native: bool) -> dict[str, tuple[list[str], str]]:
    """Kernel name -> (its tensor arguments' dtypes, its output's dtype) after the pipeline."""
    from tvm import relax

    from tvm_fuse.frontend import relax_module
    from tvm_fuse.pipeline import optimize
    from tvm_fuse.target import parse_target

    tvm_target = parse_target(target)
    optimized = optimize(relax_module(model).mod, tvm_target, bf16=RealizeBf16(vector_lanes(tvm_target), native))
    found = {}
    for block in optimized["main"].body.blocks:
        for binding in block.bindings:
            call = binding.value
            if isinstance(call, relax.Call) and call.op.name == "relax.call_tir":
                found[call.args[0].name_hint] = ([str(a.ty.dtype) for a in call.args[1].fields], str(call.ty.dtype))
    return found


def test_a_kernel_only_bf16_kernels_read_passes_them_bf16():
    kernels = _kernel_dtypes(_residual_model(), BF16_TARGET, native=True)
    (reduce,), (spatial,), (expand,) = ([v for k, v in kernels.items() if k.startswith(name)]
                                        for name in ("bf16_conv2d_relu", "bf16_winograd2_conv2d_relu",
                                                     "bf16_conv2d_sum_relu"))
    assert reduce[1] == spatial[1] == "uint16"  # written as bf16 bits
    assert spatial[0][0] == "uint16" and expand[0][0] == "uint16"  # read as data without a rounding pass
    assert expand[0][2] == "uint16"  # and as the residual
    assert expand[1] == "float32"  # the pool reads it


def test_a_depthwise_conv_between_bf16_kernels_reads_and_writes_bf16():
    """It computes in fp32 (bound by memory), but its input and output move at half the bytes."""
    kernels = _kernel_dtypes(_model(), BF16_TARGET, native=True)
    (depthwise,) = [v for k, v in kernels.items() if k.startswith("depthwise")]
    assert depthwise[0][0] == "uint16" and depthwise[0][1] == "float32"  # bf16 data, fp32 weights
    assert depthwise[1] == "uint16"


def test_wide_3x3s_at_7x7_run_as_bf16_winograd_narrow_ones_direct():
    """F(2x2) from 7x7 pixels for convs of 256 output channels or more (BF16_WIDE_CHANNELS)."""
    rng = np.random.default_rng(6)
    nodes = [helper.make_node("Conv", ["x", "wide"], ["a"], name="wide", pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["a", "narrow"], ["y"], name="narrow", pads=[1, 1, 1, 1])]
    graph = helper.make_graph(
        nodes, "small_maps", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 32, 7, 7])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 32, 7, 7])],
        [_weight(rng, "wide", 256, 32, 3, 3), _weight(rng, "narrow", 32, 256, 3, 3)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    names = sorted(_kernel_dtypes(model, BF16_TARGET, native=True))
    assert names == ["bf16_conv2d", "bf16_winograd2_conv2d"], names


def _fire_model():
    """An RGB stem conv 3->16, then a SqueezeNet fire module: squeeze 1x1 16->16, expand 1x1 and
    3x3 16->16 each, their concat, and a 1x1 head 32->16."""
    rng = np.random.default_rng(4)

    weight = functools.partial(_weight, rng)

    def conv_relu(name, source, w, **attrs):
        return [helper.make_node("Conv", [source, w], [name + "_c"], name=name, **attrs),
                helper.make_node("Relu", [name + "_c"], [name + "_r"], name=name + "_relu")]

    nodes = [*conv_relu("stem", "x", "ws", pads=[1, 1, 1, 1]), *conv_relu("squeeze", "stem_r", "wq"),
             *conv_relu("expand1", "squeeze_r", "we1"), *conv_relu("expand3", "squeeze_r", "we3", pads=[1, 1, 1, 1]),
             helper.make_node("Concat", ["expand1_r", "expand3_r"], ["fire"], name="concat", axis=1),
             helper.make_node("Conv", ["fire", "wh"], ["y"], name="head")]
    graph = helper.make_graph(
        nodes, "fire", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, 16, 16])],
        [weight("ws", 16, 3, 3, 3), weight("wq", 16, 16, 1, 1), weight("we1", 16, 16, 1, 1),
         weight("we3", 16, 16, 3, 3), weight("wh", 16, 32, 1, 1)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    return model


def test_an_rgb_stem_runs_in_bf16_and_a_concat_of_bf16_kernels_passes_bf16():
    kernels = _kernel_dtypes(_fire_model(), BF16_TARGET, native=True)
    assert all(name.startswith("bf16_") for name in kernels if "conv2d" in name)  # the 3-channel stem too
    (head,) = [v for k, v in kernels.items() if k.startswith("bf16_conv2d") and v[1] == "float32"]
    assert head[0][0] == "uint16"  # the concat joined bf16 tensors


def _pooled_model(batch: int | str = 1):
    """A stem conv 3->16 without a ReLU (negative values), a 3x3 stride-2 max-pool, a 1x1 conv, a
    2x2 max-pool in ceil mode (its last window over one row and column), a 1x1 head."""
    rng = np.random.default_rng(5)
    nodes = [helper.make_node("Conv", ["x", "ws"], ["stem"], name="stem", pads=[1, 1, 1, 1]),
             helper.make_node("MaxPool", ["stem"], ["p1"], name="pool1", kernel_shape=[3, 3], strides=[2, 2],
                              pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["p1", "w1"], ["c1"], name="pointwise"),
             helper.make_node("MaxPool", ["c1"], ["p2"], name="pool2", kernel_shape=[2, 2], strides=[2, 2],
                              ceil_mode=1),
             helper.make_node("Conv", ["p2", "wh"], ["y"], name="head")]
    graph = helper.make_graph(
        nodes, "pooled", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 3, 17, 17])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 16, 5, 5])],
        [_weight(rng, "ws", 16, 3, 3, 3), _weight(rng, "w1", 16, 16, 1, 1), _weight(rng, "wh", 16, 16, 1, 1)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    return model


def test_a_max_pool_between_bf16_kernels_passes_bf16_and_changes_no_output(portable, monkeypatch):
    """The max of rounded values is the rounded max: a pool on bf16 equals the fp32 pool whose
    output its reader rounds, negative values and ceil mode's last window included."""
    pools = {k: v for k, v in _kernel_dtypes(_pooled_model(), BF16_TARGET, native=True).items() if "pool" in k}
    assert len(pools) == 2 and all(v == (["uint16"], "uint16") for v in pools.values()), pools
    feed = {"x": np.random.default_rng(6).standard_normal((1, 3, 17, 17)).astype(np.float32)}
    (bits,) = tvm_fuse.build(_pooled_model(), portable, precision="bf16").run(None, feed)
    monkeypatch.setattr("tvm_fuse.transform.realize.bf16.MAX_POOL_TAPS", 0)  # every pool in fp32
    assert not [k for k, v in _kernel_dtypes(_pooled_model(), BF16_TARGET, native=True).items()
                if "pool" in k and "uint16" in v[0]]
    (floats,) = tvm_fuse.build(_pooled_model(), portable, precision="bf16").run(None, feed)
    np.testing.assert_array_equal(bits, floats)
    assert_close([bits], ort_outputs(_pooled_model(), feed), rtol=2e-2)


def test_a_bf16_max_pool_takes_a_run_time_batch(portable):
    """A model whose batch is a run-time count builds in bf16 (its pools once failed to) and
    pools bf16 as the static model does."""
    pools = {k: v for k, v in _kernel_dtypes(_pooled_model("N"), BF16_TARGET, native=True).items() if "pool" in k}
    assert len(pools) == 2 and all(v == (["uint16"], "uint16") for v in pools.values()), pools
    feed = {"x": np.random.default_rng(8).standard_normal((3, 3, 17, 17)).astype(np.float32)}
    ours = tvm_fuse.build(_pooled_model("N"), portable, precision="bf16")
    assert_close(ours.run(None, feed), ort_outputs(_pooled_model("N"), feed), rtol=2e-2)


def test_the_bf16_stem_reads_the_nchw_image_itself(portable):
    """The network's NCHW image is blocked as the stem conv reads it, not by a layout-transform
    pass over it first."""
    from tvm import relax

    from tvm_fuse.frontend import relax_module
    from tvm_fuse.pipeline import optimize
    from tvm_fuse.target import parse_target

    target = parse_target(BF16_TARGET)
    optimized = optimize(relax_module(_pooled_model()).mod, target, bf16=RealizeBf16(vector_lanes(target), True))
    calls = [b.value for block in optimized["main"].body.blocks for b in block.bindings
             if isinstance(b.value, relax.Call)]
    assert [c.ty.ndim for c in calls if c.op.name == "relax.layout_transform"] == [4]  # the output's, to NCHW
    stem = next(c for c in calls if c.op.name == "relax.call_tir" and c.args[0].name_hint == "bf16_conv2d")
    assert [int(d) for d in stem.args[1].fields[0].ty.shape] == [1, 3, 17, 17]
    feed = {"x": np.random.default_rng(7).standard_normal((1, 3, 17, 17)).astype(np.float32)}
    ours = tvm_fuse.build(_pooled_model(), portable, precision="bf16")
    assert_close(ours.run(None, feed), ort_outputs(_pooled_model(), feed), rtol=2e-2)


def _dense_block_model(batch_norm_read_twice: bool = False):
    """DenseNet's layer after a stem conv: batch norm + ReLU before each conv (on the stem's
    output, then on the concat of it and the layer's output), 1x1 and 3x3 convs.
    `batch_norm_read_twice`: the first ReLU's output is also a model output."""
    rng = np.random.default_rng(0)
    weight = functools.partial(_weight, rng)

    def batch_norm(name, channels):
        params = [numpy_helper.from_array(v.astype(np.float32), f"{name}_{k}") for k, v in
                  (("scale", rng.uniform(0.5, 1.5, channels)), ("bias", rng.standard_normal(channels) * 0.1),
                   ("mean", rng.standard_normal(channels) * 0.1), ("var", rng.uniform(0.5, 1.5, channels)))]
        return params, [p.name for p in params]

    bn0, bn0_names = batch_norm("bn0", 32)
    bn1, bn1_names = batch_norm("bn1", 48)
    nodes = [
        helper.make_node("Conv", ["x", "w0"], ["s"], name="stem", pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["s", *bn0_names], ["n0"], name="bn0"),
        helper.make_node("Relu", ["n0"], ["r0"], name="relu0"),
        helper.make_node("Conv", ["r0", "w1"], ["c1"], name="bottleneck"),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("Conv", ["r1", "w2"], ["c2"], name="spatial", pads=[1, 1, 1, 1]),
        helper.make_node("Concat", ["s", "c2"], ["cat"], name="concat", axis=1),
        helper.make_node("BatchNormalization", ["cat", *bn1_names], ["n1"], name="bn1"),
        helper.make_node("Relu", ["n1"], ["r2"], name="relu2"),
        helper.make_node("Conv", ["r2", "w3"], ["y"], name="transition"),
    ]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, 14, 14])]
    if batch_norm_read_twice:
        outputs.append(helper.make_tensor_value_info("r0", TensorProto.FLOAT, [1, 32, 14, 14]))
    graph = helper.make_graph(
        nodes, "dense_block", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 14, 14])], outputs,
        [weight("w0", 32, 16, 3, 3), weight("w1", 32, 32, 1, 1), weight("w2", 16, 32, 3, 3), weight("w3", 16, 48, 1, 1), *bn0, *bn1])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    return model


def _preactivation_model():
    """A pre-activation residual block: a 3x3 conv, then batch norm + ReLU before a second 3x3
    conv, whose output adds the first's. Both 3x3s are Winograd's, the second with the batch
    norm applied as it reads (the first's output has two readers: the norm does not fold)."""
    rng = np.random.default_rng(5)
    weight = functools.partial(_weight, rng)
    params = [numpy_helper.from_array(v.astype(np.float32), f"bn_{k}") for k, v in
              (("scale", rng.uniform(0.5, 1.5, 32)), ("bias", rng.standard_normal(32) * 0.1),
               ("mean", rng.standard_normal(32) * 0.1), ("var", rng.uniform(0.5, 1.5, 32)))]
    nodes = [
        helper.make_node("Conv", ["x", "w0"], ["s"], name="stem", pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["s", *(p.name for p in params)], ["n"], name="bn"),
        helper.make_node("Relu", ["n"], ["r"], name="relu"),
        helper.make_node("Conv", ["r", "w1"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("Add", ["c", "s"], ["y"], name="residual"),
    ]
    graph = helper.make_graph(
        nodes, "preactivation", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 14, 14])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 32, 14, 14])],
        [weight("w0", 32, 16, 3, 3), weight("w1", 32, 32, 3, 3), *params])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    return model


# Each model with its input shape and the nodes that must run in bf16 (3x3s at 14x14 as bf16
# Winograd, an RGB stem as a direct bf16 conv).
CHAINS = [(_residual_model, (1, 16, 14, 14), ("reduce", "spatial", "expand")),
          (_fire_model, (1, 3, 16, 16), ("stem", "squeeze", "expand1", "expand3", "head")),
          # Each batch norm + ReLU before a conv is applied by that conv as it rounds its input.
          (_dense_block_model, (1, 16, 14, 14),
           ("stem", "bn0", "relu0", "bottleneck", "spatial", "bn1", "relu2", "transition")),
          (_preactivation_model, (1, 16, 14, 14), ("stem", "bn", "relu", "conv", "residual"))]


def test_a_batch_norm_before_a_conv_joins_its_kernel_only_when_nothing_else_reads_it():
    for read_twice, joined in ((False, True), (True, False)):
        report = tvm_fuse.build(_dense_block_model(read_twice), BF16_TARGET, precision="bf16").fusion_report()
        kernel = next(k for k in report["kernels"] if "bottleneck" in k["onnx_nodes"])
        assert ({"bn0", "relu0"} <= set(kernel["onnx_nodes"])) == joined
        transition = next(k for k in report["kernels"] if "transition" in k["onnx_nodes"])
        assert {"bn1", "relu2"} <= set(transition["onnx_nodes"])


@pytest.mark.parametrize("make, shape, bf16_nodes", CHAINS)
def test_a_bf16_chain_in_the_portable_form_matches_onnx_runtime(portable, make, shape, bf16_nodes):
    model = make()
    feed = {"x": np.random.default_rng(3).standard_normal(shape).astype(np.float32)}
    ours = tvm_fuse.build(model, portable, precision="bf16")
    assert {_precisions(ours)[node] for node in bf16_nodes} == {"bf16"}
    assert_close(ours.run(None, feed), ort_outputs(model, feed), rtol=2e-2)


@pytest.mark.bf16
@pytest.mark.parametrize("make, shape, bf16_nodes", CHAINS)
def test_a_bf16_chain_matches_onnx_runtime(make, shape, bf16_nodes):
    model = make()
    feed = {"x": np.random.default_rng(3).standard_normal(shape).astype(np.float32)}
    ours = tvm_fuse.build(model, "native", precision="bf16")
    assert {_precisions(ours)[node] for node in bf16_nodes} == {"bf16"}
    assert_close(ours.run(None, feed), ort_outputs(model, feed), rtol=2e-2)


@pytest.mark.parametrize("kernel", [1, 3])
def test_a_one_channel_image_conv_runs_in_bf16_widened_with_a_zero_channel(portable, kernel):
    """Found by tests/differential: the kernel took the weights' pair of input channels for two
    of the data's one-channel blocks and merged them into none; outputs up to 1e38."""
    rng = np.random.default_rng(3)
    graph = helper.make_graph([helper.make_node("Conv", ["x", "w"], ["y"], pads=[kernel // 2] * 4)], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 12, 12])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, 12, 12])],
                              [_weight(rng, "w", 16, 1, kernel, kernel)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    feed = {"x": rng.standard_normal((1, 1, 12, 12)).astype(np.float32)}
    ours = tvm_fuse.build(model, portable, precision="bf16")
    assert "bf16" in _precisions(ours).values()
    assert_close(ours.run(None, feed), ort_outputs(model, feed), rtol=2e-2)
