"""Small conv models for the int8 tests: a stem (the image's conv and max-pool) and a residual
block, as in ResNet; a classifier head; and the same quantized by ONNX Runtime's tool."""

from __future__ import annotations

import functools

import numpy as np
from onnx import TensorProto, helper, numpy_helper


def _model(name: str, nodes, x_shape, y_shape, weights):
    """An opset-17 model of `nodes` from input x to output y."""
    graph = helper.make_graph(nodes, name, [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, y_shape)], weights)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    return model


def _conv_weight(rng, name: str, out: int, inp: int, k: int):
    """A conv weight of He initialization's scale, as an ONNX initializer."""
    return numpy_helper.from_array((rng.standard_normal((out, inp, k, k)) * np.sqrt(2 / (inp * k * k)))
                                   .astype(np.float32), name)


def _bias(rng, name: str, out: int):
    return numpy_helper.from_array((rng.standard_normal(out) * 0.1).astype(np.float32), name)


def residual_block(channels: int = 32, size: int = 16, seed: int = 0):
    """x -> conv3x3+relu (a) -> conv3x3 + x -> relu (b) -> conv1x1 (y): every conv int8-able."""
    rng = np.random.default_rng(seed)
    weight, bias = functools.partial(_conv_weight, rng), functools.partial(_bias, rng)
    c = channels
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["a"], name="relu1"),
        helper.make_node("Conv", ["a", "w2", "b2"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
        helper.make_node("Add", ["c2", "x"], ["s"], name="add"),
        helper.make_node("Relu", ["s"], ["b"], name="relu2"),
        helper.make_node("Conv", ["b", "w3", "b3"], ["y"], name="conv3"),
    ]
    weights = [weight("w1", c, c, 3), bias("b1", c), weight("w2", c, c, 3), bias("b2", c),
               weight("w3", 2 * c, c, 1), bias("b3", 2 * c)]
    return _model("residual_block", nodes, [1, c, size, size], [1, 2 * c, size, size], weights)


def symbolic_cnn(channels: int = 64, seed: int = 0):
    """x[n, channels, h, w] -> 3x3/2 conv + relu -> depthwise 3x3 + relu -> 3x3 conv + relu (a
    Winograd conv at static sizes) -> 1x1 conv to twice the channels + relu (y): blocked convs
    over a symbolic batch, height and width."""
    rng = np.random.default_rng(seed)
    nodes, weights, previous = [], [], "x"
    layers = [(channels, 3, 2, 1), (channels, 3, 1, channels), (channels, 3, 1, 1), (2 * channels, 1, 1, 1)]
    for i, (out, kernel, stride, group) in enumerate(layers):
        output = "y" if i == len(layers) - 1 else f"a{i}"
        nodes += [helper.make_node("Conv", [previous, f"w{i}", f"b{i}"], [f"c{i}"], name=f"conv{i}",
                                   pads=[kernel // 2] * 4, strides=[stride] * 2, group=group),
                  helper.make_node("Relu", [f"c{i}"], [output], name=f"relu{i}")]
        weights += [_conv_weight(rng, f"w{i}", out, channels // group, kernel), _bias(rng, f"b{i}", out)]
        previous = output
    return _model("symbolic_cnn", nodes, ["n", channels, "h", "w"], None, weights)


def classifier(batch: int = 1, channels: int = 32, classes: int = 1000, size: int = 8, seed: int = 0):
    """x -> conv3x3 + relu -> global average pool -> flatten -> Gemm to `classes` (y), as a
    CNN's head."""
    rng = np.random.default_rng(seed)
    c = channels
    weights = [numpy_helper.from_array((rng.standard_normal((c, c, 3, 3)) * np.sqrt(2 / (9 * c))).astype(np.float32), "w1"),
               numpy_helper.from_array((rng.standard_normal((classes, c)) * np.sqrt(1 / c)).astype(np.float32), "fc_w"),
               numpy_helper.from_array((rng.standard_normal(classes) * 0.1).astype(np.float32), "fc_b")]
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c1"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["a"], name="relu"),
        helper.make_node("GlobalAveragePool", ["a"], ["p"], name="pool"),
        helper.make_node("Flatten", ["p"], ["f"], name="flatten"),
        helper.make_node("Gemm", ["f", "fc_w", "fc_b"], ["y"], name="fc", transB=1),
    ]
    return _model("classifier", nodes, [batch, c, size, size], [batch, classes], weights)


def stem(size: int = 32, seed: int = 0):
    """x (3 channels) -> conv7x7/2 + relu (a) -> maxpool3x3/2 (p) -> conv3x3 + relu (q) ->
    conv3x3 + p -> relu (y): ResNet-18's stem and first block, whose residual is the max-pool."""
    rng = np.random.default_rng(seed)
    weights = [numpy_helper.from_array((rng.standard_normal(shape) * np.sqrt(2 / np.prod(shape[1:])))
                                       .astype(np.float32), name)
               for name, shape in (("w1", (16, 3, 7, 7)), ("w2", (16, 16, 3, 3)), ("w3", (16, 16, 3, 3)))]
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c1"], name="conv1", pads=[3, 3, 3, 3], strides=[2, 2]),
        helper.make_node("Relu", ["c1"], ["a"], name="relu1"),
        helper.make_node("MaxPool", ["a"], ["p"], name="pool", kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[2, 2]),
        helper.make_node("Conv", ["p", "w2"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c2"], ["q"], name="relu2"),
        helper.make_node("Conv", ["q", "w3"], ["c3"], name="conv3", pads=[1, 1, 1, 1]),
        helper.make_node("Add", ["c3", "p"], ["s"], name="add"),
        helper.make_node("Relu", ["s"], ["y"], name="relu3"),
    ]
    out = size // 4
    return _model("stem", nodes, [1, 3, size, size], [1, 16, out, out], weights)


def inverted_residual(channels: int = 16, expand: int = 4, size: int = 16, seed: int = 0):
    """x -> conv1x1 + relu6 (expand) -> depthwise conv3x3 + relu6 -> conv1x1 + x (y), as
    MobileNetV2's block."""
    rng = np.random.default_rng(seed)
    wide = channels * expand

    def initializer(name, shape, fan_in):
        return numpy_helper.from_array((rng.standard_normal(shape) * np.sqrt(2 / fan_in)).astype(np.float32), name)

    weights = [initializer("w1", (wide, channels, 1, 1), channels), initializer("w2", (wide, 1, 3, 3), 9),
               initializer("w3", (channels, wide, 1, 1), wide),
               numpy_helper.from_array(np.array(0.0, np.float32), "zero"),
               numpy_helper.from_array(np.array(6.0, np.float32), "six")]
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c1"], name="expand"),
        helper.make_node("Clip", ["c1", "zero", "six"], ["a"], name="relu6_1"),
        helper.make_node("Conv", ["a", "w2"], ["c2"], name="depthwise", pads=[1, 1, 1, 1], group=wide),
        helper.make_node("Clip", ["c2", "zero", "six"], ["b"], name="relu6_2"),
        helper.make_node("Conv", ["b", "w3"], ["c3"], name="project"),
        helper.make_node("Add", ["c3", "x"], ["y"], name="add"),
    ]
    shape = [1, channels, size, size]
    return _model("inverted_residual", nodes, shape, shape, weights)


def inception_branches(channels: int = 16, size: int = 14, seed: int = 0):
    """x -> [conv1x1 + relu, conv3x3 + relu] -> concat along channels (c) -> conv1x1 (y): an
    Inception module's branches and the layer that reads them."""
    rng = np.random.default_rng(seed)

    weight = functools.partial(_conv_weight, rng)

    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c1"], name="branch1"),
        helper.make_node("Relu", ["c1"], ["a"], name="relu1"),
        helper.make_node("Conv", ["x", "w2"], ["c2"], name="branch2", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c2"], ["b"], name="relu2"),
        helper.make_node("Concat", ["a", "b"], ["c"], name="concat", axis=1),
        helper.make_node("Conv", ["c", "w3"], ["y"], name="reader"),
    ]
    shape = [1, channels, size, size]
    return _model("inception_branches", nodes, shape, shape,
                  [weight("w1", channels, channels, 1), weight("w2", 2 * channels, channels, 3),
                   weight("w3", channels, 3 * channels, 1)])


def conv_chain(depth: int = 3, channels: int = 16, size: int = 14, seed: int = 0):
    """x -> (conv3x3 + relu) x `depth` -> conv1x1 (y): layers of one shape, each on its own scale."""
    rng = np.random.default_rng(seed)
    nodes, weights, previous = [], [], "x"
    for i in range(depth):
        nodes += [helper.make_node("Conv", [previous, f"w{i}"], [f"c{i}"], name=f"conv{i}", pads=[1, 1, 1, 1]),
                  helper.make_node("Relu", [f"c{i}"], [f"a{i}"], name=f"relu{i}")]
        # Each layer's gain differs, so that each output has a scale of its own.
        gain = (i + 1) * np.sqrt(2 / (channels * 9))
        weights.append(numpy_helper.from_array((rng.standard_normal((channels, channels, 3, 3)) * gain)
                                               .astype(np.float32), f"w{i}"))
        previous = f"a{i}"
    nodes.append(helper.make_node("Conv", [previous, "w_out"], ["y"], name="reader"))
    weights.append(numpy_helper.from_array(rng.standard_normal((channels, channels, 1, 1)).astype(np.float32) * 0.3,
                                           "w_out"))
    shape = [1, channels, size, size]
    return _model("conv_chain", nodes, shape, shape, weights)


def attention(tokens: int = 16, width: int = 64, seed: int = 0):
    """x -> one self-attention head, as a transformer's exporter writes it: MatMul then Add of
    each projection's bias, softmax(q @ k^T / sqrt(width)) @ v, the output projection (y)."""
    rng = np.random.default_rng(seed)

    def matrix(name):
        return numpy_helper.from_array((rng.standard_normal((width, width)) / np.sqrt(width)).astype(np.float32), name)

    def bias(name):
        return numpy_helper.from_array((rng.standard_normal(width) * 0.1).astype(np.float32), name)

    nodes = []
    for name in ("q", "k", "v", "o"):
        source = "x" if name != "o" else "attended"
        nodes += [helper.make_node("MatMul", [source, f"w{name}"], [f"{name}_product"]),
                  helper.make_node("Add", [f"{name}_product", f"b{name}"], [name if name != "o" else "y"])]
    nodes[6:6] = [helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 2, 1]),
                  helper.make_node("MatMul", ["q", "kt"], ["scores"]),
                  helper.make_node("Mul", ["scores", "temperature"], ["scaled"]),
                  helper.make_node("Softmax", ["scaled"], ["weights"], axis=-1),
                  helper.make_node("MatMul", ["weights", "v"], ["attended"])]
    weights = [t for name in ("q", "k", "v", "o") for t in (matrix(f"w{name}"), bias(f"b{name}"))]
    weights.append(numpy_helper.from_array(np.array(1 / np.sqrt(width), np.float32), "temperature"))
    return _model("attention", nodes, [1, tokens, width], [1, tokens, width], weights)


def ort_qdq(model, samples: np.ndarray, activations: str = "uint8"):
    """`model` quantized by ONNX Runtime's tool: static QDQ, per-channel s8 weights, minmax
    ranges over `samples` (stacked on the batch axis)."""
    import tempfile
    from pathlib import Path

    import onnx
    from onnxruntime.quantization import (
        CalibrationDataReader,
        QuantFormat,
        QuantType,
        quantize_static,
    )

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.feeds = iter([{model.graph.input[0].name: s[None]} for s in samples])

        def get_next(self):
            return next(self.feeds, None)

    with tempfile.TemporaryDirectory() as folder:
        source, target = Path(folder, "float.onnx"), Path(folder, "qdq.onnx")
        onnx.save(model, source)
        quantize_static(source, target, Reader(), quant_format=QuantFormat.QDQ, per_channel=True,
                        activation_type=QuantType.QUInt8 if activations == "uint8" else QuantType.QInt8,
                        weight_type=QuantType.QInt8)
        return onnx.load(target)


def split_bottleneck(channels: int = 16, size: int = 16, seed: int = 0, sizes: bool = False):
    """YOLOv8's C2f: x -> conv1x1 + relu -> Split into halves a, b -> b through two conv3x3
    (+ relu; the second adds b) -> Concat(a, b, m) -> conv1x1 (y). `sizes`: the Split's sizes
    given as its input (as exporters write it), not as its count of outputs."""
    rng = np.random.default_rng(seed)
    c = channels

    weight = functools.partial(_conv_weight, rng)

    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c1"], name="cv1"),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("Split", ["r1", "sizes"], ["a", "b"], name="split", axis=1) if sizes else
        helper.make_node("Split", ["r1"], ["a", "b"], name="split", axis=1, num_outputs=2),
        helper.make_node("Conv", ["b", "w2"], ["c2"], name="m.cv1", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c2"], ["r2"], name="relu2"),
        helper.make_node("Conv", ["r2", "w3"], ["c3"], name="m.cv2", pads=[1, 1, 1, 1]),
        helper.make_node("Add", ["c3", "b"], ["m"], name="add"),
        helper.make_node("Concat", ["a", "b", "m"], ["cat"], name="concat", axis=1),
        helper.make_node("Conv", ["cat", "w4"], ["y"], name="cv2"),
    ]
    weights = [weight("w1", 2 * c, c, 1), weight("w2", c, c, 3), weight("w3", c, c, 3), weight("w4", c, 3 * c, 1)]
    if sizes:
        weights.append(numpy_helper.from_array(np.array([c, c], np.int64), "sizes"))
    model = _model("split_bottleneck", nodes, [1, c, size, size], [1, c, size, size], weights)
    model.opset_import[0].version = 18  # Split's num_outputs
    return model
