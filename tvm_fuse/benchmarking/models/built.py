"""Real model architectures written node by node with `onnx.helper`, with seeded weights.

Tests and benchmarks need realistic ONNX graphs (MobileNetV2, ResNet-18, a BERT-like encoder)
without a dependency on torch or on downloads. Each builder here emits the graph an exporter
would: Conv followed by a separate BatchNormalization (for the compiler to fold), ReLU6 as Clip,
attention spelled out as MatMul/Reshape/Transpose/Softmax, erf-GELU written out in full.

Weights are drawn from `np.random.default_rng(seed)` so that activations stay in a normal range:
He-normal convs, BatchNorm statistics near identity, small scales on the last BatchNorm of each
residual branch (else the variance doubles at every residual sum), N(0, 1/width) matrices and
near-identity LayerNorms for the encoder. The outputs are raw logits or hidden states, with no
softmax, so comparing two runtimes on them is meaningful.

A `batch` or `seq_len` given as a str becomes a symbolic dimension (dim_param) of that name.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
IR_VERSION = 9  # ONNX Runtime 1.31 rejects IR versions above 13; 9 matches opset 17


class _Graph:
    """Collects nodes and seeded initializers; each op method appends one node (or a few) and
    returns the name of its output, so that models read as chains of calls."""

    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: dict[str, onnx.TensorProto] = {}
        self._node_names: set[str] = set()

    # -- plumbing --

    def add_initializer(self, name: str, value) -> str:
        """Add `value` (float64 stored as float32) once; shared constants reuse their name."""
        if name not in self.initializers:
            array = np.asarray(value)
            if array.dtype == np.float64:
                array = array.astype(np.float32)
            self.initializers[name] = numpy_helper.from_array(array, name)
        return name

    def node(self, op: str, inputs: list[str], name: str, output: str | None = None,
             **attrs) -> str:
        """Append node `name` of type `op`; its single output is `output` (default: `name`)."""
        if name in self._node_names:
            raise ValueError(f"duplicate node name {name!r}")
        self._node_names.add(name)
        output = output or name
        self.nodes.append(helper.make_node(op, inputs, [output], name=name, **attrs))
        return output

    def normal(self, name: str, shape, std: float) -> str:
        return self.add_initializer(name, self.rng.normal(0.0, std, shape))

    def uniform(self, name: str, shape, low: float, high: float) -> str:
        return self.add_initializer(name, self.rng.uniform(low, high, shape))

    # -- CNN ops --

    def conv(self, x: str, c_in: int, c_out: int, kernel: int, name: str, stride: int = 1,
             groups: int = 1) -> str:
        """Bias-free Conv with He-normal weights and "same"-style padding."""
        fan_in = c_in // groups * kernel * kernel
        shape = (c_out, c_in // groups, kernel, kernel)
        w = self.normal(f"{name}.weight", shape, np.sqrt(2.0 / fan_in))
        return self.node("Conv", [x, w], name, kernel_shape=[kernel, kernel],
                         strides=[stride, stride], pads=[kernel // 2] * 4, group=groups)

    def bn(self, x: str, channels: int, name: str, residual: bool = False) -> str:
        """BatchNormalization; `residual` (last BN of a residual branch) draws small scales."""
        low, high = (0.1, 0.3) if residual else (0.5, 1.5)
        params = [
            self.uniform(f"{name}.weight", channels, low, high),
            self.normal(f"{name}.bias", channels, 0.1),
            self.normal(f"{name}.running_mean", channels, 0.1),
            self.uniform(f"{name}.running_var", channels, 0.5, 1.5),
        ]
        return self.node("BatchNormalization", [x, *params], name, epsilon=1e-5)

    def relu(self, x: str, name: str) -> str:
        return self.node("Relu", [x], name)

    def relu6(self, x: str, name: str) -> str:
        low = self.add_initializer("relu6.min", np.float32(0.0))
        high = self.add_initializer("relu6.max", np.float32(6.0))
        return self.node("Clip", [x, low, high], name)

    def classifier(self, x: str, features: int, num_classes: int) -> str:
        """GlobalAveragePool, Flatten and a Gemm to "logits"."""
        x = self.node("GlobalAveragePool", [x], "avgpool")
        x = self.node("Flatten", [x], "flatten", axis=1)
        w = self.normal("fc.weight", (num_classes, features), np.sqrt(1.0 / features))
        b = self.normal("fc.bias", num_classes, 0.1)
        return self.node("Gemm", [x, w, b], "fc", output="logits", transB=1)

    # -- transformer ops --

    def linear(self, x: str, d_in: int, d_out: int, name: str) -> str:
        """MatMul with a [d_in, d_out] weight of std 1/sqrt(d_in), then Add of a bias. BERT's
        0.02 would leave the softmax nearly uniform at small widths (attention then adds ~2% to
        the residual stream); 1/sqrt(d_in) gives peaked attention and is 0.036 at width 768."""
        w = self.normal(f"{name}.weight", (d_in, d_out), np.sqrt(1.0 / d_in))
        y = self.node("MatMul", [x, w], f"{name}.matmul")
        return self.node("Add", [y, self.normal(f"{name}.bias", d_out, 0.02)], f"{name}.add")

    def layer_norm(self, x: str, hidden: int, name: str) -> str:
        scale = self.add_initializer(f"{name}.weight", 1.0 + self.rng.normal(0.0, 0.02, hidden))
        bias = self.normal(f"{name}.bias", hidden, 0.02)
        return self.node("LayerNormalization", [x, scale, bias], name, axis=-1, epsilon=1e-12)

    def reshape(self, x: str, shape: list[int], name: str) -> str:
        target = self.add_initializer(f"{name}.shape", np.array(shape, dtype=np.int64))
        return self.node("Reshape", [x, target], name)

    def gelu(self, x: str, name: str) -> str:
        """erf-GELU as exporters write it: x * 0.5 * (1 + Erf(x / sqrt(2)))."""
        sqrt2 = self.add_initializer("gelu.sqrt2", np.float32(np.sqrt(2.0)))
        one = self.add_initializer("gelu.one", np.float32(1.0))
        half = self.add_initializer("gelu.half", np.float32(0.5))
        y = self.node("Div", [x, sqrt2], f"{name}.div")
        y = self.node("Erf", [y], f"{name}.erf")
        y = self.node("Add", [y, one], f"{name}.add")
        y = self.node("Mul", [x, y], f"{name}.mul")
        return self.node("Mul", [y, half], f"{name}.mul_half")

    # -- assembly --

    def model(self, name: str, inputs: list[onnx.ValueInfoProto],
              outputs: list[onnx.ValueInfoProto]) -> onnx.ModelProto:
        initializers = list(self.initializers.values())
        graph = helper.make_graph(self.nodes, name, inputs, outputs, initializers)
        model = helper.make_model(graph, producer_name="tvm_fuse.benchmarking.models.built",
                                  opset_imports=[helper.make_opsetid("", OPSET)])
        model.ir_version = IR_VERSION
        return model


def _image_input(batch: int | str) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info("input", TensorProto.FLOAT, [batch, 3, 224, 224])


def _logits_output(batch: int | str, num_classes: int) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info("logits", TensorProto.FLOAT, [batch, num_classes])


# -- MobileNetV2 --

# (expansion t, output channels c, repeats n, first stride s), as in the MobileNetV2 paper.
_MOBILENET_V2_BLOCKS = [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2),
                        (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1)]


def _conv_bn_relu6(g: _Graph, x: str, c_in: int, c_out: int, kernel: int, name: str,
                   stride: int = 1, groups: int = 1) -> str:
    x = g.conv(x, c_in, c_out, kernel, f"{name}.conv", stride, groups)
    x = g.bn(x, c_out, f"{name}.bn")
    return g.relu6(x, f"{name}.relu6")


def _inverted_residual(g: _Graph, x: str, c_in: int, c_out: int, stride: int, expansion: int,
                       name: str) -> str:
    """1x1 expand (skipped when expansion is 1), 3x3 depthwise, linear 1x1 projection, and a
    residual Add when the shapes allow it."""
    residual = stride == 1 and c_in == c_out
    hidden = c_in * expansion
    y = x
    if expansion != 1:
        y = _conv_bn_relu6(g, y, c_in, hidden, 1, f"{name}.expand")
    y = _conv_bn_relu6(g, y, hidden, hidden, 3, f"{name}.depthwise", stride, groups=hidden)
    y = g.conv(y, hidden, c_out, 1, f"{name}.project.conv")
    y = g.bn(y, c_out, f"{name}.project.bn", residual=residual)
    return g.node("Add", [x, y], f"{name}.add") if residual else y


def mobilenet_v2(batch: int | str = "batch", num_classes: int = 1000,
                 seed: int = 0) -> onnx.ModelProto:
    """MobileNetV2 (width 1.0, 224x224): "input" [batch, 3, 224, 224] -> "logits"."""
    g = _Graph(seed)
    x = _conv_bn_relu6(g, "input", 3, 32, 3, "features.0", stride=2)
    channels, index = 32, 1
    for expansion, c_out, repeats, first_stride in _MOBILENET_V2_BLOCKS:
        for i in range(repeats):
            stride = first_stride if i == 0 else 1
            x = _inverted_residual(g, x, channels, c_out, stride, expansion, f"features.{index}")
            channels, index = c_out, index + 1
    x = _conv_bn_relu6(g, x, channels, 1280, 1, f"features.{index}")
    g.classifier(x, 1280, num_classes)
    return g.model("mobilenet_v2", [_image_input(batch)], [_logits_output(batch, num_classes)])


# -- ResNet-18 --


def _basic_block(g: _Graph, x: str, c_in: int, c_out: int, stride: int, name: str) -> str:
    """Two 3x3 conv+BN with a ReLU between, plus an identity or 1x1 projection shortcut."""
    y = g.conv(x, c_in, c_out, 3, f"{name}.conv1", stride)
    y = g.relu(g.bn(y, c_out, f"{name}.bn1"), f"{name}.relu1")
    y = g.conv(y, c_out, c_out, 3, f"{name}.conv2")
    y = g.bn(y, c_out, f"{name}.bn2", residual=True)
    shortcut = x
    if stride != 1 or c_in != c_out:
        shortcut = g.conv(x, c_in, c_out, 1, f"{name}.downsample.conv", stride)
        shortcut = g.bn(shortcut, c_out, f"{name}.downsample.bn")
    y = g.node("Add", [y, shortcut], f"{name}.add")
    return g.relu(y, f"{name}.relu2")


def resnet18(batch: int | str = "batch", num_classes: int = 1000, seed: int = 0) -> onnx.ModelProto:
    """ResNet-18 (224x224): "input" [batch, 3, 224, 224] -> "logits"."""
    g = _Graph(seed)
    x = g.conv("input", 3, 64, 7, "conv1", stride=2)
    x = g.relu(g.bn(x, 64, "bn1"), "relu")
    x = g.node("MaxPool", [x], "maxpool", kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    channels = 64
    for stage, c_out in enumerate([64, 128, 256, 512], start=1):
        for i in range(2):
            stride = 2 if stage > 1 and i == 0 else 1
            x = _basic_block(g, x, channels, c_out, stride, f"layer{stage}.{i}")
            channels = c_out
    g.classifier(x, 512, num_classes)
    return g.model("resnet18", [_image_input(batch)], [_logits_output(batch, num_classes)])


# -- BERT-like transformer encoder --


def _self_attention(g: _Graph, x: str, hidden: int, heads: int, name: str) -> str:
    """Multi-head self-attention on x [batch, seq, hidden]; returns the output projection."""
    head_dim = hidden // heads

    def split_heads(role: str, perm: list[int]) -> str:
        y = g.linear(x, hidden, hidden, f"{name}.{role}")
        y = g.reshape(y, [0, 0, heads, head_dim], f"{name}.{role}.split_heads")
        return g.node("Transpose", [y], f"{name}.{role}.transpose", perm=perm)

    q = split_heads("query", [0, 2, 1, 3])  # [batch, heads, seq, head_dim]
    k = split_heads("key", [0, 2, 3, 1])  # [batch, heads, head_dim, seq]
    v = split_heads("value", [0, 2, 1, 3])
    scores = g.node("MatMul", [q, k], f"{name}.scores")
    scale = g.add_initializer(f"{name}.scale", np.float32(np.sqrt(head_dim)))
    scores = g.node("Div", [scores, scale], f"{name}.scores.scaled")
    probs = g.node("Softmax", [scores], f"{name}.softmax", axis=-1)
    context = g.node("MatMul", [probs, v], f"{name}.context")
    context = g.node("Transpose", [context], f"{name}.context.transpose", perm=[0, 2, 1, 3])
    context = g.reshape(context, [0, 0, hidden], f"{name}.context.merge_heads")
    return g.linear(context, hidden, hidden, f"{name}.output")


def _encoder_layer(g: _Graph, x: str, hidden: int, heads: int, ffn: int, name: str) -> str:
    """Post-LN encoder layer: LN(x + attention(x)), then LN(y + FFN(y))."""
    attention = _self_attention(g, x, hidden, heads, f"{name}.attention")
    y = g.node("Add", [x, attention], f"{name}.attention.residual")
    y = g.layer_norm(y, hidden, f"{name}.attention.layer_norm")
    h = g.gelu(g.linear(y, hidden, ffn, f"{name}.intermediate"), f"{name}.gelu")
    h = g.linear(h, ffn, hidden, f"{name}.ffn_output")
    z = g.node("Add", [y, h], f"{name}.ffn.residual")
    return g.layer_norm(z, hidden, f"{name}.ffn.layer_norm")


def transformer_encoder(batch: int | str = "batch", seq_len: int | str = 128, hidden: int = 256,
                        heads: int = 4, ffn: int = 1024, layers: int = 2, vocab: int | None = None,
                        seed: int = 0) -> onnx.ModelProto:
    """BERT-like post-LN encoder -> "last_hidden_state" [batch, seq_len, hidden]. The input is
    float "hidden_states" [batch, seq_len, hidden], or with `vocab` int64 "input_ids"
    [batch, seq_len] looked up in an embedding table (Gather, then LayerNormalization)."""
    if hidden % heads or layers < 1:
        raise ValueError(f"need layers >= 1 and hidden ({hidden}) a multiple of heads ({heads})")
    g = _Graph(seed)
    if vocab is None:
        x = "hidden_states"
        graph_input = helper.make_tensor_value_info(x, TensorProto.FLOAT, [batch, seq_len, hidden])
    else:
        graph_input = helper.make_tensor_value_info("input_ids", TensorProto.INT64,
                                                    [batch, seq_len])
        table = g.normal("embeddings.word_embeddings.weight", (vocab, hidden), 0.02)
        x = g.node("Gather", [table, "input_ids"], "embeddings.gather", axis=0)
        x = g.layer_norm(x, hidden, "embeddings.layer_norm")
    for i in range(layers):
        x = _encoder_layer(g, x, hidden, heads, ffn, f"encoder.layer.{i}")
    g.nodes[-1].output[0] = "last_hidden_state"  # rename the final LayerNormalization's output
    output = helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT,
                                           [batch, seq_len, hidden])
    return g.model("transformer_encoder", [graph_input], [output])


BUILT_MODELS = {
    "mobilenet_v2": mobilenet_v2,
    "resnet18": resnet18,
    "transformer_encoder": transformer_encoder,
}
