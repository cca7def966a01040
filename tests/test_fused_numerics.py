"""Every fused op of the pattern table against ONNX Runtime, on small graphs built with onnx.helper.

Each test checks (a) the outputs equal ONNX Runtime's within the conftest tolerance and (b) the
fusion really happened: the expected pattern is one of `fusion_report()["kernels"]` and the
post-op nodes are among that kernel's `onnx_nodes`, not in `unfused`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import onnx
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

import tvm_fuse
from tests.conftest import AVX512_TARGET, assert_close, ort_outputs, random_inputs

pytestmark = pytest.mark.avx512


# --- graph building -----------------------------------------------------------------------------


def _model(nodes, inputs: dict[str, tuple], initializers: dict[str, np.ndarray], opset: int = 17):
    """A model of `nodes`; outputs are the values no node reads, with inferred shapes."""
    produced = [out for node in nodes for out in node.output]
    read = {name for node in nodes for name in node.input}
    graph = helper.make_graph(
        nodes,
        "fused_numerics",
        [helper.make_tensor_value_info(name, TensorProto.FLOAT, shape) for name, shape in inputs.items()],
        [helper.make_tensor_value_info(name, TensorProto.FLOAT, None) for name in produced if name not in read],
        [numpy_helper.from_array(np.asarray(value, np.float32), name) for name, value in initializers.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8 if opset <= 18 else 9
    inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    del model.graph.output[:]
    model.graph.output.extend(inferred.graph.output)
    onnx.checker.check_model(model, full_check=True)
    return model


def _he_normal(rng: np.random.Generator, shape, fan_in: int) -> np.ndarray:
    return (rng.standard_normal(shape) * math.sqrt(2.0 / fan_in)).astype(np.float32)


def _bias(rng: np.random.Generator, size: int) -> np.ndarray:
    return (0.1 * rng.standard_normal(size)).astype(np.float32)


@dataclass
class Chain:
    """ONNX nodes appended after an anchor: what they read, produce, and need."""

    nodes: list = field(default_factory=list)
    output: str = ""
    initializers: dict = field(default_factory=dict)
    opset: int = 17

    @property
    def names(self) -> list[str]:
        return [node.name for node in self.nodes]


def _const(chain: Chain, name: str, value: float) -> str:
    chain.initializers[name] = np.array(value, np.float32)
    return name


def _activation(form: str, x: str, tag: str) -> Chain:
    """Activation `form` of `x`, in the ONNX spelling exporters produce; nodes named `{tag}_*`."""
    chain = Chain()

    def node(op, inputs, **attrs):
        out = f"{tag}_{len(chain.nodes)}_{op.lower()}"
        chain.nodes.append(helper.make_node(op, inputs, [out], name=out, **attrs))
        return out

    if form in ("relu", "sigmoid", "tanh", "softplus"):
        chain.output = node(form.capitalize() if form != "softplus" else "Softplus", [x])
    elif form == "clip":  # relu6, bounds as inputs (opset >= 11)
        chain.output = node("Clip", [x, _const(chain, f"{tag}_min", 0.0), _const(chain, f"{tag}_max", 6.0)])
    elif form == "leaky_relu":
        chain.output = node("LeakyRelu", [x], alpha=0.1)
    elif form == "gelu_op":  # opset 20's Gelu
        chain.output, chain.opset = node("Gelu", [x]), 20
    elif form == "gelu_tanh_op":
        chain.output, chain.opset = node("Gelu", [x], approximate="tanh"), 20
    elif form == "gelu_erf":  # x * (erf(x / sqrt 2) + 1) * 0.5, as torch exports nn.GELU
        inner = node("Erf", [node("Div", [x, _const(chain, f"{tag}_sqrt2", math.sqrt(2.0))])])
        whole = node("Mul", [x, node("Add", [inner, _const(chain, f"{tag}_one", 1.0)])])
        chain.output = node("Mul", [whole, _const(chain, f"{tag}_half", 0.5)])
    elif form == "gelu_erf_half_first":  # x * 0.5 * (1 + erf(x / sqrt 2)), as HF's python gelu traces
        inner = node("Erf", [node("Div", [x, _const(chain, f"{tag}_sqrt2", math.sqrt(2.0))])])
        half = node("Mul", [x, _const(chain, f"{tag}_half", 0.5)])
        chain.output = node("Mul", [half, node("Add", [_const(chain, f"{tag}_one", 1.0), inner])])
    elif form == "gelu_tanh_formula":  # 0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3)))
        cube = node("Pow", [x, _const(chain, f"{tag}_three", 3.0)])
        inner = node("Add", [x, node("Mul", [_const(chain, f"{tag}_c", 0.044715), cube])])
        tanh = node("Tanh", [node("Mul", [_const(chain, f"{tag}_k", math.sqrt(2.0 / math.pi)), inner])])
        one_plus = node("Add", [_const(chain, f"{tag}_one", 1.0), tanh])
        chain.output = node("Mul", [node("Mul", [_const(chain, f"{tag}_half", 0.5), x]), one_plus])
    elif form == "silu":  # x * sigmoid(x)
        chain.output = node("Mul", [x, node("Sigmoid", [x])])
    elif form == "silu_swapped":  # sigmoid(x) * x
        chain.output = node("Mul", [node("Sigmoid", [x]), x])
    elif form == "hardswish":
        chain.output = node("HardSwish", [x])
    elif form == "hardswish_p2o":  # x * clip(x + 3, 0, 6) / 6, multiplied first, as paddle2onnx writes it
        clipped = node("Clip", [node("Add", [x, _const(chain, f"{tag}_three", 3.0)]),
                                _const(chain, f"{tag}_zero", 0.0), _const(chain, f"{tag}_six", 6.0)])
        chain.output = node("Div", [node("Mul", [x, clipped]), f"{tag}_six"])
    elif form == "hardswish_of_hardsigmoid":  # x * HardSigmoid(x), as paddle2onnx writes PP-LCNet's
        chain.output = node("Mul", [x, node("HardSigmoid", [x], alpha=1 / 6, beta=0.5)])
    elif form == "hardsigmoid":
        chain.output = node("HardSigmoid", [x], alpha=0.25, beta=0.4)
    else:
        raise ValueError(form)
    return chain


# form -> the activation's name in the table (and so in the kernel's pattern)
ACTIVATION_FORMS = {
    "relu": "relu",
    "clip": "clip",
    "leaky_relu": "leaky_relu",
    "sigmoid": "sigmoid",
    "tanh": "tanh",
    "softplus": "softplus",
    "gelu_op": "gelu",
    "gelu_erf": "gelu",
    "gelu_erf_half_first": "gelu",
    "gelu_tanh_op": "gelu_tanh",
    "gelu_tanh_formula": "gelu_tanh",
    "silu": "silu",
    "silu_swapped": "silu",
    "hardswish": "hardswish",
    "hardswish_p2o": "hardswish",
    "hardswish_of_hardsigmoid": "hardswish",
    "hardsigmoid": "clip",  # after a conv, its scale and shift fold into the conv's weights and bias
}


def _param(form: str | None, *rest, id: str | None = None):
    return pytest.param(form, *rest, id=id)


FUSING_FORMS = list(ACTIVATION_FORMS)


# --- checks -------------------------------------------------------------------------------------


def _build_and_compare(model, shapes: dict[str, tuple], seed: int = 0, **build_options) -> dict:
    """Build for the AVX-512 target, run on random inputs, compare with ORT; the fusion report."""
    compiled = tvm_fuse.build(model, AVX512_TARGET, **build_options)
    feed = random_inputs(shapes, seed)
    assert_close(compiled.run(None, feed), ort_outputs(model, feed))
    return compiled.fusion_report()


def _assert_fused(report: dict, pattern: str, nodes: list[str]) -> None:
    """A kernel of `pattern` computes all of `nodes` (but those folded into its weights at build
    time, as a bias is with a scale and shift after it), and none of them is left unfused."""
    patterns = [k["pattern"] for k in report["kernels"]]
    kernels = [k for k in report["kernels"] if k["pattern"] == pattern]
    assert kernels, f"no {pattern} kernel; kernels: {patterns}, unfused: {report['unfused']}"
    folded = {f["onnx_node"] for f in report["folded"]}
    assert any(set(nodes) - folded <= set(k["onnx_nodes"]) for k in kernels), (
        f"{nodes} not all in one {pattern} kernel: {kernels}"
    )
    unfused = {u["onnx_node"] for u in report["unfused"]}
    assert not unfused & set(nodes), f"left unfused: {report['unfused']}"


# --- conv2d -------------------------------------------------------------------------------------


def _conv(rng, x: str, in_channels: int, out_channels: int, kernel=(3, 3), *, groups=1, name="conv",
          bias=True, **attrs) -> Chain:
    weight = _he_normal(rng, (out_channels, in_channels // groups, *kernel),
                        in_channels // groups * math.prod(kernel))
    chain = Chain(output=f"{name}_out", initializers={f"{name}_w": weight})
    inputs = [x, f"{name}_w"]
    if bias:
        chain.initializers[f"{name}_b"] = _bias(rng, out_channels)
        inputs.append(f"{name}_b")
    chain.nodes.append(helper.make_node("Conv", inputs, [chain.output], name=name, group=groups,
                                        kernel_shape=list(kernel), **attrs))
    return chain


def _conv_model(anchor: Chain, post: list[Chain], inputs: dict[str, tuple]):
    nodes = anchor.nodes + [n for chain in post for n in chain.nodes]
    initializers = {**anchor.initializers}
    for chain in post:
        initializers.update(chain.initializers)
    opset = max([anchor.opset] + [chain.opset for chain in post])
    return _model(nodes, inputs, initializers, opset)


@pytest.mark.parametrize("form", [_param(form) for form in ACTIVATION_FORMS])
def test_conv2d_bias_activation(form):
    rng = np.random.default_rng(1)
    shape = (2, 5, 11, 9)
    conv = _conv(rng, "x", 5, 17, (3, 3), strides=[2, 1], pads=[0, 1, 1, 2])
    act = _activation(form, conv.output, "act")
    report = _build_and_compare(_conv_model(conv, [act], {"x": shape}), {"x": shape})
    _assert_fused(report, f"conv2d+bias+{ACTIVATION_FORMS[form]}", ["conv", *act.names])


def test_pp_lcnet_v3_block_is_one_kernel():
    """PP-LCNetV3 (PP-OCRv4 det): conv, a learnable scale and shift of one value each, HardSwish
    as paddle2onnx writes it, another scale and shift. The first folds into the conv, the
    second is a post-op after the activation; the chain stays blocked (16 channels)."""
    rng = np.random.default_rng(3)
    shape = (1, 16, 10, 10)
    conv = _conv(rng, "x", 16, 16, (3, 3), pads=[1, 1, 1, 1])

    def affine(x, tag):
        chain = Chain(initializers={f"{tag}_s": np.array([1.3], np.float32), f"{tag}_t": np.array([-0.2], np.float32)})
        scaled = f"{tag}_mul"
        chain.nodes = [helper.make_node("Mul", [f"{tag}_s", x], [scaled], name=scaled),
                       helper.make_node("Add", [scaled, f"{tag}_t"], [f"{tag}_add"], name=f"{tag}_add")]
        chain.output = f"{tag}_add"
        return chain

    first = affine(conv.output, "lab0")
    act = _activation("hardswish_p2o", first.output, "act")
    second = affine(act.output, "lab1")
    post = [first, act, second]
    report = _build_and_compare(_conv_model(conv, post, {"x": shape}), {"x": shape})
    _assert_fused(report, "conv2d+bias+hardswish+scale", ["conv", *act.names, *second.names])
    assert report["layout_transforms"] == 2


def _residual(conv: Chain, act_form: str | None, other: str, conv_first: bool) -> list[Chain]:
    """(act) -> Add(other) -> Relu after `conv`."""
    chains = []
    x = conv.output
    if act_form is not None:
        chains.append(_activation(act_form, x, "act"))
        x = chains[-1].output
    operands = [x, other] if conv_first else [other, x]
    add = Chain(nodes=[helper.make_node("Add", operands, ["sum_out"], name="sum")], output="sum_out")
    chains += [add, _activation("relu", add.output, "sum_act")]
    return chains


@pytest.mark.parametrize(
    "act_form, conv_first",
    [_param(*case) for case in
     [(None, True), ("relu", True), ("relu", False), ("clip", True), ("silu", False), ("hardswish", True)]],
)
def test_conv2d_bias_activation_sum_relu(act_form, conv_first):
    """ResNet's residual block end: conv + bias (+ act) + Add(shortcut) + Relu, one kernel."""
    rng = np.random.default_rng(2)
    shape = (1, 17, 12, 12)
    conv = _conv(rng, "x", 17, 17, (3, 3), pads=[1, 1, 1, 1])
    post = _residual(conv, act_form, "shortcut", conv_first)
    model = _conv_model(conv, post, {"x": shape, "shortcut": shape})
    report = _build_and_compare(model, {"x": shape, "shortcut": shape})
    act = f"+{ACTIVATION_FORMS[act_form]}" if act_form else ""
    _assert_fused(report, f"conv2d+bias{act}+sum+relu", ["conv", *[n for c in post for n in c.names]])


def _divisors(n: int) -> list[int]:
    return [d for d in range(2, n) if n % d == 0]


@st.composite
def conv_cases(draw):
    kind = draw(st.sampled_from(["conv2d", "group_conv2d", "depthwise_conv2d"]))
    if kind == "group_conv2d":
        in_channels = draw(st.sampled_from([6, 15, 24]))
        groups = draw(st.sampled_from(_divisors(in_channels)))
        out_channels = groups * draw(st.sampled_from([1, 2, 3]))
    elif kind == "depthwise_conv2d":
        in_channels = groups = draw(st.sampled_from([3, 5, 17, 24]))
        out_channels = in_channels * draw(st.sampled_from([1, 2]))
    else:
        in_channels, groups = draw(st.sampled_from([3, 5, 17, 24])), 1
        out_channels = draw(st.sampled_from([5, 16, 17, 24]))
    kernel = (draw(st.sampled_from([1, 3, 5])), draw(st.sampled_from([1, 3, 5])))
    strides = [draw(st.sampled_from([1, 2])) for _ in range(2)]
    dilations = [draw(st.sampled_from([1, 2])) for _ in range(2)]
    pads = [draw(st.integers(0, 2)) for _ in range(4)]  # top, left, bottom, right
    spatial = []
    for axis in range(2):
        reach = dilations[axis] * (kernel[axis] - 1) + 1 - pads[axis] - pads[axis + 2]
        spatial.append(draw(st.integers(max(5, reach), 20)))
    return {
        "kind": kind, "in_channels": in_channels, "out_channels": out_channels, "groups": groups,
        "kernel": kernel, "strides": strides, "dilations": dilations, "pads": pads,
        "shape": (draw(st.sampled_from([1, 2])), in_channels, *spatial),
        "act": draw(st.sampled_from([None, *FUSING_FORMS])),
        "residual": draw(st.booleans()),
        "dynamic_batch": draw(st.booleans()),
    }


def _conv_out_shape(case) -> tuple:
    batch, _, *spatial = case["shape"]
    out = [
        (size + case["pads"][a] + case["pads"][a + 2] - case["dilations"][a] * (case["kernel"][a] - 1) - 1)
        // case["strides"][a] + 1
        for a, size in enumerate(spatial)
    ]
    return (batch, case["out_channels"], *out)


@settings(max_examples=12, deadline=None)
@given(case=conv_cases(), seed=st.integers(0, 2**16))
# Found by this test: a leaky ReLU before the residual sum left the sum unfused (TVM's layout
# conversion has no rule for it; see transform.slopes_to_max).
@example(case={"kind": "conv2d", "in_channels": 3, "out_channels": 16, "groups": 1, "kernel": (1, 1),
               "strides": [1, 1], "dilations": [1, 1], "pads": [0, 0, 0, 0], "shape": (1, 3, 5, 5),
               "act": "leaky_relu", "residual": True, "dynamic_batch": False}, seed=0)
def test_conv2d_geometry(case, seed):
    """Channels not divisible by the vector width, strides, dilations, asymmetric pads, groups,
    any activation and the residual sum, with the batch static or symbolic."""
    rng = np.random.default_rng(seed)
    conv = _conv(rng, "x", case["in_channels"], case["out_channels"], case["kernel"], groups=case["groups"],
                 strides=case["strides"], dilations=case["dilations"], pads=case["pads"])
    pattern = f"{case['kind']}+bias"
    feed_shapes = {"x": case["shape"]}
    if case["residual"]:
        feed_shapes["shortcut"] = _conv_out_shape(case)
        post = _residual(conv, case["act"], "shortcut", conv_first=True)
    else:
        post = [_activation(case["act"], conv.output, "act")] if case["act"] else []
    pattern += f"+{ACTIVATION_FORMS[case['act']]}" if case["act"] else ""
    pattern += "+sum+relu" if case["residual"] else ""
    batch = "N" if case["dynamic_batch"] else case["shape"][0]
    model = _conv_model(conv, post, {name: (batch, *shape[1:]) for name, shape in feed_shapes.items()})
    report = _build_and_compare(model, feed_shapes, seed=seed)
    _assert_fused(report, pattern, ["conv", *[n for c in post for n in c.names]])


# --- conv1d -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "in_channels, out_channels, groups, kind",
    [(5, 17, 1, "conv1d"), (24, 24, 24, "depthwise_conv1d"), (6, 9, 3, "group_conv1d")],
)
def test_conv1d_bias_relu(in_channels, out_channels, groups, kind):
    rng = np.random.default_rng(3)
    shape = (2, in_channels, 23)
    conv = _conv(rng, "x", in_channels, out_channels, (3,), groups=groups, strides=[2], pads=[1, 2],
                 dilations=[2])
    act = _activation("relu", conv.output, "act")
    report = _build_and_compare(_conv_model(conv, [act], {"x": shape}), {"x": shape})
    _assert_fused(report, f"{kind}+bias+relu", ["conv", *act.names])


@pytest.mark.xfail(strict=True, reason="known limitation: TVM's layout conversion adds a per-channel graph "
                   "input in NCHW, converting the blocked conv output back first, so the add is not fused")
def test_conv2d_sum_of_a_broadcast_operand():
    """The sum operand need only broadcast into the conv's output: here one value per channel."""
    rng = np.random.default_rng(13)
    conv = _conv(rng, "x", 5, 8, (3, 3), pads=[1, 1, 1, 1])
    add = Chain(nodes=[helper.make_node("Add", [conv.output, "per_channel"], ["sum_out"], name="sum")])
    shapes = {"x": (2, 5, 7, 7), "per_channel": (8, 1, 1)}
    report = _build_and_compare(_conv_model(conv, [add], shapes), shapes)
    _assert_fused(report, "conv2d+bias+sum", ["conv", "sum"])


def test_conv2d_without_bias_relu():
    rng = np.random.default_rng(17)
    conv = _conv(rng, "x", 5, 17, (3, 3), pads=[1, 1, 1, 1], bias=False)
    act = _activation("relu", conv.output, "act")
    report = _build_and_compare(_conv_model(conv, [act], {"x": (1, 5, 8, 8)}), {"x": (1, 5, 8, 8)})
    _assert_fused(report, "conv2d+relu", ["conv", *act.names])


def test_conv2d_projection_shortcut():
    """ResNet's downsampling block: conv3x3/2 + conv1x1/2 (shortcut) + Add + Relu; one conv absorbs
    the sum, the other feeds it."""
    rng = np.random.default_rng(18)
    main = _conv(rng, "x", 8, 16, (3, 3), name="main", strides=[2, 2], pads=[1, 1, 1, 1])
    shortcut = _conv(rng, "x", 8, 16, (1, 1), name="shortcut", strides=[2, 2])
    add = Chain(nodes=[helper.make_node("Add", [main.output, shortcut.output], ["sum_out"], name="sum"),
                       helper.make_node("Relu", ["sum_out"], ["y"], name="relu")])
    report = _build_and_compare(_conv_model(main, [shortcut, add], {"x": (2, 8, 10, 10)}), {"x": (2, 8, 10, 10)})
    assert sorted(k["pattern"] for k in report["kernels"]) == ["conv2d+bias", "conv2d+bias+sum+relu"], report
    fused = next(k for k in report["kernels"] if k["pattern"] == "conv2d+bias+sum+relu")
    assert {"sum", "relu"} <= set(fused["onnx_nodes"]) and report["unfused"] == [], report


def test_conv2d_sum_of_its_own_input():
    """y = x + conv(x): the sum operand is the conv's input."""
    rng = np.random.default_rng(19)
    conv = _conv(rng, "x", 8, 8, (3, 3), pads=[1, 1, 1, 1])
    add = Chain(nodes=[helper.make_node("Add", ["x", conv.output], ["y"], name="sum")])
    report = _build_and_compare(_conv_model(conv, [add], {"x": (1, 8, 6, 6)}), {"x": (1, 8, 6, 6)})
    _assert_fused(report, "conv2d+bias+sum", ["conv", "sum"])


def test_intermediate_with_two_consumers_stays_unfused():
    """conv + bias is read by Relu and is a graph output too: Relu stays out of the kernel, and both
    outputs are right."""
    rng = np.random.default_rng(14)
    conv = _conv(rng, "x", 5, 8, (3, 3), pads=[1, 1, 1, 1])
    act = _activation("relu", conv.output, "act")
    model = _conv_model(conv, [act], {"x": (1, 5, 7, 7)})
    model.graph.output.append(helper.make_tensor_value_info(conv.output, TensorProto.FLOAT, [1, 8, 7, 7]))
    report = _build_and_compare(model, {"x": (1, 5, 7, 7)})
    assert [k["pattern"] for k in report["kernels"]] == ["conv2d+bias"], report
    assert "consumers" in _unfused(report)["act_0_relu"], report


def test_conv2d_batch_norm_relu_matches():
    """Conv + BatchNormalization + Relu: the conv is in a kernel and the numbers match. (Whether
    BN folds into the weights is another pass's business: no exact pattern here.)"""
    rng = np.random.default_rng(4)
    shape = (1, 5, 10, 10)
    conv = _conv(rng, "x", 5, 17, (3, 3), pads=[1, 1, 1, 1], bias=False)
    bn = Chain(
        nodes=[helper.make_node("BatchNormalization", [conv.output, "scale", "shift", "mean", "var"],
                                ["bn_out"], name="bn", epsilon=1e-5)],
        output="bn_out",
        initializers={
            "scale": rng.uniform(0.5, 1.5, 17), "shift": _bias(rng, 17),
            "mean": _bias(rng, 17), "var": rng.uniform(0.5, 2.0, 17),
        },
    )
    act = _activation("relu", bn.output, "act")
    report = _build_and_compare(_conv_model(conv, [bn, act], {"x": shape}), {"x": shape})
    assert any("conv" in k["onnx_nodes"] for k in report["kernels"]), report


# --- dense and batch_matmul ---------------------------------------------------------------------


def _gemm_model(rng, act_form: str | None = None):
    """Gemm(x[4, 24], W[20, 24], C[20]) with transB, alpha and beta, then (act)."""
    initializers = {"w": _he_normal(rng, (20, 24), 24), "c": _bias(rng, 20)}
    nodes = [helper.make_node("Gemm", ["x", "w", "c"], ["y"], name="gemm", transB=1, alpha=0.5, beta=2.0)]
    chains = []
    if act_form:
        chains.append(_activation(act_form, "y", "act"))
        nodes += chains[-1].nodes
        initializers.update(chains[-1].initializers)
    return _model(nodes, {"x": (4, 24)}, initializers, max([17] + [c.opset for c in chains])), chains


@pytest.mark.parametrize("act_form", [None, "relu"])
def test_gemm_trans_b_alpha_beta(act_form):
    model, chains = _gemm_model(np.random.default_rng(5), act_form)
    report = _build_and_compare(model, {"x": (4, 24)})
    pattern = "dense+bias" + (f"+{ACTIVATION_FORMS[act_form]}" if act_form else "")
    _assert_fused(report, pattern, ["gemm", *[n for c in chains for n in c.names]])


def _dense_3d_model(rng, act_form: str | None, residual: bool = False, bias_first: bool = False, seq=7):
    """MatMul(x[B, S, 24], W[24, 20]) + Add(b[20]) (+ act) (+ Add(residual)), as transformers do."""
    initializers = {"w": _he_normal(rng, (24, 20), 24), "b": _bias(rng, 20)}
    inputs = {"x": ("batch", seq, 24)}
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["mm"], name="matmul"),
        helper.make_node("Add", ["b", "mm"] if bias_first else ["mm", "b"], ["biased"], name="bias"),
    ]
    chains, out = [], "biased"
    if act_form:
        chains.append(_activation(act_form, out, "act"))
        out = chains[-1].output
    if residual:
        inputs["residual"] = ("batch", seq, 20)
        chains.append(Chain(nodes=[helper.make_node("Add", ["residual", out], ["sum_out"], name="sum")]))
    for chain in chains:
        nodes += chain.nodes
        initializers.update(chain.initializers)
    model = _model(nodes, inputs, initializers, max([17] + [c.opset for c in chains]))
    return model, ["matmul", "bias", *[n for c in chains for n in c.names]]


@pytest.mark.parametrize(
    "act_form, bias_first",
    [_param(form, False, id=str(form)) for form in [None, *ACTIVATION_FORMS]]
    + [_param(form, True, id=f"{form}-bias_first") for form in (None, "relu", "gelu_erf")],
)
def test_dense_3d_bias_activation(act_form, bias_first):
    model, nodes = _dense_3d_model(np.random.default_rng(6), act_form, bias_first=bias_first)
    report = _build_and_compare(model, {"x": (2, 7, 24)}, input_shapes={"x": (2, 7, 24)})
    pattern = "dense+bias" + (f"+{ACTIVATION_FORMS[act_form]}" if act_form else "")
    _assert_fused(report, pattern, nodes)


@pytest.mark.parametrize("act_form", [None, "gelu_erf"])
def test_dense_bias_sum(act_form):
    """The residual add after a projection: dense + bias (+ act) + sum, one kernel."""
    model, nodes = _dense_3d_model(np.random.default_rng(7), act_form, residual=True)
    shapes = {"x": (3, 7, 24), "residual": (3, 7, 20)}
    report = _build_and_compare(model, shapes, input_shapes=shapes)
    pattern = "dense+bias" + (f"+{ACTIVATION_FORMS[act_form]}" if act_form else "") + "+sum"
    _assert_fused(report, pattern, nodes)


def test_dense_sum_without_bias():
    rng = np.random.default_rng(16)
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["mm"], name="matmul"),
        helper.make_node("Add", ["residual", "mm"], ["y"], name="sum"),
    ]
    shapes = {"x": (2, 5, 24), "residual": (2, 5, 20)}
    model = _model(nodes, shapes, {"w": _he_normal(rng, (24, 20), 24)})
    _assert_fused(_build_and_compare(model, shapes), "dense+sum", ["matmul", "sum"])


def test_dense_with_dynamic_batch_and_sequence():
    """Symbolic batch and sequence: the residual's dims must be proved equal to the output's."""
    model, nodes = _dense_3d_model(np.random.default_rng(8), "gelu_erf", residual=True, seq="seq")
    compiled = tvm_fuse.build(model, AVX512_TARGET)
    for batch, seq in ((1, 3), (3, 17)):
        feed = random_inputs({"x": (batch, seq, 24), "residual": (batch, seq, 20)}, seed=seq)
        assert_close(compiled.run(None, feed), ort_outputs(model, feed))
    _assert_fused(compiled.fusion_report(), "dense+bias+gelu+sum", nodes)


@pytest.mark.parametrize(
    "x_shape, w_shape, bias, act_form",
    [
        ((3, 5, 24), (3, 24, 10), False, None),
        ((3, 5, 24), (3, 24, 10), True, "relu"),
        ((2, 3, 5, 24), (3, 24, 10), True, None),  # x has one more leading dim
        ((3, 5, 24), (1, 24, 10), False, "relu"),  # the weight's batch broadcasts
    ],
)
def test_batch_matmul_constant_3d_weight(x_shape, w_shape, bias, act_form):
    rng = np.random.default_rng(9)
    initializers = {"w": _he_normal(rng, w_shape, w_shape[1]), "b": _bias(rng, w_shape[2])}
    nodes = [helper.make_node("MatMul", ["x", "w"], ["y"], name="matmul")]
    out, pattern, post = "y", "batch_matmul", []
    if bias:
        nodes.append(helper.make_node("Add", ["y", "b"], ["biased"], name="bias"))
        out, pattern, post = "biased", pattern + "+bias", ["bias"]
    if act_form:
        act = _activation(act_form, out, "act")
        nodes += act.nodes
        pattern, post = f"{pattern}+{ACTIVATION_FORMS[act_form]}", post + act.names
    model = _model(nodes, {"x": x_shape}, initializers if bias else {"w": initializers["w"]})
    report = _build_and_compare(model, {"x": x_shape})
    _assert_fused(report, pattern, ["matmul", *post])


# --- switching fusion off -----------------------------------------------------------------------

FAMILIES = ["conv_bias", "conv_bn", "conv_relu", "conv_sum", "fc_bias", "fc_bn", "fc_relu", "fc_sum", "attention"]


def _unfused(report: dict) -> dict[str, str]:
    return {u["onnx_node"]: u["reason"] for u in report["unfused"]}


def _conv_relu_sum_model(bias: bool = True):
    """Conv (+ its bias input) + Relu + Add(shortcut) + Relu."""
    rng = np.random.default_rng(10)
    shapes = {"x": (1, 5, 9, 9), "shortcut": (1, 5, 9, 9)}
    conv = _conv(rng, "x", 5, 5, (3, 3), pads=[1, 1, 1, 1], bias=bias)
    post = _residual(conv, "relu", "shortcut", conv_first=True)
    return _conv_model(conv, post, shapes), shapes, [n for c in post for n in c.names]


def _dense_relu_sum_model():
    """MatMul + Add(bias) + Relu + Add(residual)."""
    model, nodes = _dense_3d_model(np.random.default_rng(11), "relu", residual=True)
    return model, {"x": (2, 7, 24), "residual": (2, 7, 20)}, nodes[1:]


@pytest.mark.parametrize("bias", [True, False])
def test_disable_all_conv(bias):
    model, shapes, post_ops = _conv_relu_sum_model(bias)
    fused = _build_and_compare(model, shapes)
    _assert_fused(fused, f"conv2d{'+bias' if bias else ''}+relu+sum+relu", ["conv", *post_ops])

    report = _build_and_compare(model, shapes, disable_fusion="all")
    assert [(k["pattern"], k["onnx_nodes"]) for k in report["kernels"]] == [("conv2d", ["conv"])], report
    unfused = _unfused(report)
    assert set(post_ops) <= set(unfused), report
    assert set(report["disabled_families"]) == set(FAMILIES)
    if not bias:  # the relu reads the conv kernel directly
        assert "'conv_relu' is disabled" in unfused["act_0_relu"], unfused


def test_disable_all_dense():
    model, shapes, post_ops = _dense_relu_sum_model()
    fused = _build_and_compare(model, shapes, input_shapes=shapes)
    _assert_fused(fused, "dense+bias+relu+sum", ["matmul", *post_ops])

    report = _build_and_compare(model, shapes, input_shapes=shapes, disable_fusion="all")
    assert [(k["pattern"], k["onnx_nodes"]) for k in report["kernels"]] == [("dense", ["matmul"])], report
    unfused = _unfused(report)
    assert set(post_ops) <= set(unfused), report
    assert "'fc_bias' is disabled" in unfused["bias"], unfused


@pytest.mark.parametrize("graph", ["conv_with_bias", "conv_without_bias", "dense"])
def test_disable_all_names_a_family_for_every_post_op(graph):
    if graph == "dense":
        model, shapes, post_ops = _dense_relu_sum_model()
    else:
        model, shapes, post_ops = _conv_relu_sum_model(bias=graph == "conv_with_bias")
    report = tvm_fuse.build(model, AVX512_TARGET, input_shapes=shapes, disable_fusion="all").fusion_report()
    unfused = _unfused(report)
    for node in post_ops:
        assert "is disabled" in unfused[node], f"{node}: {unfused[node]}"


def test_conv_relu_disabled_by_environment(monkeypatch):
    monkeypatch.setenv("TVM_FUSE_DISABLE_FUSE_CONV_RELU", "1")
    rng = np.random.default_rng(12)
    shape = (1, 5, 9, 9)
    conv = _conv(rng, "x", 5, 8, (3, 3), pads=[1, 1, 1, 1])
    act = _activation("relu", conv.output, "act")
    report = _build_and_compare(_conv_model(conv, [act], {"x": shape}), {"x": shape})
    assert [k["pattern"] for k in report["kernels"]] == ["conv2d+bias"]
    reason = _unfused(report)["act_0_relu"]
    assert "'conv_relu' is disabled" in reason and "TVM_FUSE_DISABLE_FUSE_CONV_RELU" in reason, reason
    assert report["disabled_families"] == ["conv_relu"]


def test_clip_with_run_time_bounds_runs_unfused():
    """Clip bounds computed at run time are no activation the kernel can hold: the Clip runs on
    its own, is reported as such, and the numbers still match."""
    rng = np.random.default_rng(15)
    conv = _conv(rng, "x", 5, 8, (3, 3), pads=[1, 1, 1, 1])
    clip = Chain(nodes=[
        helper.make_node("Squeeze", ["low_1"], ["low"], name="squeeze_low"),  # scalar bounds from
        helper.make_node("Squeeze", ["high_1"], ["high"], name="squeeze_high"),  # [1]-shaped inputs
        helper.make_node("Clip", [conv.output, "low", "high"], ["y"], name="clip"),
    ])
    model = _conv_model(conv, [clip], {"x": (1, 5, 6, 6), "low_1": (1,), "high_1": (1,)})
    compiled = tvm_fuse.build(model, AVX512_TARGET)
    feed = {"x": random_inputs({"x": (1, 5, 6, 6)})["x"],
            "low_1": np.array([-0.1], np.float32), "high_1": np.array([0.5], np.float32)}
    assert_close(compiled.run(None, feed), ort_outputs(model, feed))
    report = compiled.fusion_report()
    assert [k["pattern"] for k in report["kernels"]] == ["conv2d+bias"], report
    assert "clip" in _unfused(report), report
