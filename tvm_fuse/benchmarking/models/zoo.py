"""Small models of the architectures users bring that no PyPI wheel ships, written node by
node as their exporters write them (seeded weights, `built._Graph`): a YOLOv8-style detector,
a MobileNetV3 with squeeze-excitation, a U-Net, a CRNN text recognizer, and the three nets of
a face-detection cascade as TensorFlow exports them (channels-last). They are small
(64x64 images) so that the tests of the real-model issues can build them in seconds; what
matters is the ops and how they connect.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper

from .built import _Graph


def _cbs(g: _Graph, x: str, c_in: int, c_out: int, kernel: int, name: str, stride: int = 1) -> str:
    """YOLOv8's Conv: conv, batch-norm, SiLU as torch exports it (x * Sigmoid(x))."""
    y = g.bn(g.conv(x, c_in, c_out, kernel, f"{name}.conv", stride), c_out, f"{name}.bn")
    return g.node("Mul", [y, g.node("Sigmoid", [y], f"{name}.sigmoid")], f"{name}.silu")


def _c2f(g: _Graph, x: str, channels: int, bottlenecks: int, name: str, c_in: int | None = None) -> str:
    """C2f: a 1x1 conv, a Split of its channels in halves, bottlenecks on the second half, a
    Concat of every part and a 1x1 conv."""
    half = channels // 2
    y = _cbs(g, x, c_in or channels, channels, 1, f"{name}.cv1")
    sizes = g.add_initializer(f"{name}.split", np.array([half, half], np.int64))
    split = helper.make_node("Split", [y, sizes], [f"{name}.a", f"{name}.b"], name=f"{name}.split", axis=1)
    g.nodes.append(split)
    parts = [f"{name}.a", f"{name}.b"]
    for i in range(bottlenecks):
        inner = _cbs(g, _cbs(g, parts[-1], half, half, 3, f"{name}.m{i}.cv1"), half, half, 3, f"{name}.m{i}.cv2")
        parts.append(g.node("Add", [parts[-1], inner], f"{name}.m{i}.add"))
    joined = g.node("Concat", parts, f"{name}.concat", axis=1)
    return _cbs(g, joined, half * len(parts), channels, 1, f"{name}.cv2")


def _sppf(g: _Graph, x: str, channels: int, name: str) -> str:
    """SPPF: a 1x1 conv, three chained 5x5 max-pools (stride 1), Concat, a 1x1 conv."""
    half = channels // 2
    pooled = [_cbs(g, x, channels, half, 1, f"{name}.cv1")]
    for i in range(3):
        pooled.append(g.node("MaxPool", [pooled[-1]], f"{name}.pool{i}", kernel_shape=[5, 5], pads=[2] * 4,
                             strides=[1, 1]))
    return _cbs(g, g.node("Concat", pooled, f"{name}.concat", axis=1), 4 * half, channels, 1, f"{name}.cv2")


def _upsample(g: _Graph, x: str, name: str) -> str:
    scales = g.add_initializer("upsample.scales", np.array([1, 1, 2, 2], np.float32))
    return g.node("Resize", [x, "", scales], name, mode="nearest")


def _head(g: _Graph, x: str, channels: int, classes: int, bins: int, name: str) -> str:
    """One scale of the decoupled head: box (4 * bins) and class logits, flattened to [b, C, h*w]."""
    box = g.conv(_cbs(g, x, channels, channels, 3, f"{name}.box.cv"), channels, 4 * bins, 1, f"{name}.box.pred")
    cls = g.conv(_cbs(g, x, channels, channels, 3, f"{name}.cls.cv"), channels, classes, 1, f"{name}.cls.pred")
    joined = g.node("Concat", [box, cls], f"{name}.concat", axis=1)
    return g.reshape(joined, [0, 4 * bins + classes, -1], f"{name}.flatten")


def yolov8_detector(batch: int | str = "batch", size: int = 64, classes: int = 8, seed: int = 0) -> onnx.ModelProto:
    """A YOLOv8-style detector: SiLU convs, C2f blocks (Split / Concat), SPPF, a nearest-upsample
    neck, a decoupled head at two scales and a DFL box decoder (softmax over 16 bins, then a
    fixed 1x1 conv by 0..15). "images" [batch, 3, size, size] -> "output" [batch, 4 + classes,
    anchors], boxes as distances in bins and class probabilities."""
    g, bins = _Graph(seed), 16
    x = _cbs(g, "images", 3, 16, 3, "stem", stride=2)
    x = _cbs(g, x, 16, 32, 3, "down1", stride=2)
    x = _c2f(g, x, 32, 1, "c2f1")
    p3 = _c2f(g, _cbs(g, x, 32, 64, 3, "down2", stride=2), 64, 1, "c2f2")
    p4 = _sppf(g, _c2f(g, _cbs(g, p3, 64, 64, 3, "down3", stride=2), 64, 1, "c2f3"), 64, "sppf")
    p3 = _c2f(g, g.node("Concat", [_upsample(g, p4, "neck.up"), p3], "neck.concat", axis=1), 64, 1, "neck.c2f",
              c_in=128)
    flat = [_head(g, p, 64, classes, bins, f"head{i}") for i, p in enumerate((p3, p4))]
    anchors = g.node("Concat", flat, "head.concat", axis=2)
    sizes = g.add_initializer("head.split", np.array([4 * bins, classes], np.int64))
    g.nodes.append(helper.make_node("Split", [anchors, sizes], ["head.box", "head.cls"], name="head.split", axis=1))
    # DFL: [b, 4, bins, A] -> bins first -> softmax over bins -> expectation by a 1x1 conv
    box = g.node("Transpose", [g.reshape("head.box", [0, 4, bins, -1], "dfl.reshape")], "dfl.transpose",
                 perm=[0, 2, 1, 3])
    box = g.node("Softmax", [box], "dfl.softmax", axis=1)
    weight = g.add_initializer("dfl.weight", np.arange(bins, dtype=np.float32).reshape(1, bins, 1, 1))
    box = g.reshape(g.node("Conv", [box, weight], "dfl.conv", kernel_shape=[1, 1]), [0, 4, -1], "dfl.flatten")
    probabilities = g.node("Sigmoid", ["head.cls"], "head.sigmoid")
    g.node("Concat", [box, probabilities], "output", axis=1)
    anchors_count = (size // 8) ** 2 + (size // 16) ** 2
    return g.model("yolov8_detector",
                   [helper.make_tensor_value_info("images", TensorProto.FLOAT, [batch, 3, size, size])],
                   [helper.make_tensor_value_info("output", TensorProto.FLOAT, [batch, 4 + classes, anchors_count])])


def _activation(g: _Graph, x: str, hard_swish: bool, name: str) -> str:
    return g.node("HardSwish", [x], name) if hard_swish else g.relu(x, name)


def _squeeze_excite(g: _Graph, x: str, channels: int, name: str) -> str:
    """torchvision's SqueezeExcitation: global pool, 1x1 conv to a quarter of the channels
    (rounded up to 8), ReLU, 1x1 conv back, HardSigmoid (alpha 1/6), channel-wise Mul."""
    squeezed = -(-channels // 4 // 8) * 8
    y = g.node("GlobalAveragePool", [x], f"{name}.pool")
    for i, (c_in, c_out) in enumerate([(channels, squeezed), (squeezed, channels)]):
        weight = g.normal(f"{name}.fc{i}.weight", (c_out, c_in, 1, 1), np.sqrt(2.0 / c_in))
        bias = g.normal(f"{name}.fc{i}.bias", c_out, 0.1)
        y = g.node("Conv", [y, weight, bias], f"{name}.fc{i}", kernel_shape=[1, 1])
        y = g.relu(y, f"{name}.relu") if i == 0 else g.node("HardSigmoid", [y], f"{name}.gate", alpha=1 / 6, beta=0.5)
    return g.node("Mul", [y, x], f"{name}.scale")


def _bneck(g: _Graph, x: str, c_in: int, expanded: int, c_out: int, kernel: int, stride: int, se: bool,
           hard_swish: bool, name: str) -> str:
    """MobileNetV3's inverted residual: 1x1 expand, depthwise kxk, optional SE, linear 1x1 projection,
    and the residual add when the shape is kept."""
    y = x
    if expanded != c_in:
        y = _activation(g, g.bn(g.conv(y, c_in, expanded, 1, f"{name}.expand"), expanded, f"{name}.expand.bn"),
                        hard_swish, f"{name}.expand.act")
    y = g.bn(g.conv(y, expanded, expanded, kernel, f"{name}.dw", stride, groups=expanded), expanded, f"{name}.dw.bn")
    y = _activation(g, y, hard_swish, f"{name}.dw.act")
    if se:
        y = _squeeze_excite(g, y, expanded, f"{name}.se")
    y = g.bn(g.conv(y, expanded, c_out, 1, f"{name}.project"), c_out, f"{name}.project.bn", residual=True)
    return g.node("Add", [x, y], f"{name}.add") if stride == 1 and c_in == c_out else y


def mobilenet_v3(batch: int | str = "batch", size: int = 64, classes: int = 10, seed: int = 0) -> onnx.ModelProto:
    """A MobileNetV3-Small-style classifier as torchvision exports it: HardSwish stem, inverted
    residuals with ReLU or HardSwish, 3x3 and 5x5 depthwise convs, squeeze-excitation blocks,
    a 1x1 conv, global pool and a Gemm / HardSwish / Gemm head.
    "input" [batch, 3, size, size] -> "logits" [batch, classes]."""
    g = _Graph(seed)
    x = g.node("HardSwish", [g.bn(g.conv("input", 3, 16, 3, "stem", 2), 16, "stem.bn")], "stem.act")
    blocks = [(16, 16, 16, 3, 2, True, False), (16, 72, 24, 3, 2, False, False), (24, 88, 24, 3, 1, False, False),
              (24, 96, 40, 5, 2, True, True), (40, 240, 40, 5, 1, True, True), (40, 120, 48, 5, 1, True, True)]
    for i, block in enumerate(blocks):
        x = _bneck(g, x, *block, f"block{i}")
    x = g.node("HardSwish", [g.bn(g.conv(x, 48, 288, 1, "last"), 288, "last.bn")], "last.act")
    x = g.node("Flatten", [g.node("GlobalAveragePool", [x], "pool")], "flatten", axis=1)
    for i, (d_in, d_out) in enumerate([(288, 256), (256, classes)]):
        weight = g.normal(f"fc{i}.weight", (d_out, d_in), np.sqrt(1.0 / d_in))
        x = g.node("Gemm", [x, weight, g.normal(f"fc{i}.bias", d_out, 0.1)], f"fc{i}", transB=1,
                   output="logits" if i else None)
        x = g.node("HardSwish", [x], "fc0.act") if i == 0 else x
    return g.model("mobilenet_v3", [helper.make_tensor_value_info("input", TensorProto.FLOAT, [batch, 3, size, size])],
                   [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [batch, classes])])


def _cbr(g: _Graph, x: str, c_in: int, c_out: int, name: str) -> str:
    return g.relu(g.bn(g.conv(x, c_in, c_out, 3, f"{name}.conv"), c_out, f"{name}.bn"), f"{name}.relu")


def _double(g: _Graph, x: str, c_in: int, c_out: int, name: str) -> str:
    return _cbr(g, _cbr(g, x, c_in, c_out, f"{name}.1"), c_out, c_out, f"{name}.2")


def _transposed(g: _Graph, x: str, c_in: int, c_out: int, kernel: int, name: str, pad: int = 0) -> str:
    weight = g.normal(f"{name}.weight", (c_in, c_out, kernel, kernel), np.sqrt(2.0 / (c_in * kernel * kernel / 4)))
    bias = g.normal(f"{name}.bias", c_out, 0.1)
    return g.node("ConvTranspose", [x, weight, bias], name, kernel_shape=[kernel, kernel], strides=[2, 2],
                  pads=[pad] * 4)


def unet(batch: int | str = "batch", size: int = 64, classes: int = 2, seed: int = 0) -> onnx.ModelProto:
    """A two-level U-Net: conv+BN+ReLU pairs, max-pool downsampling, ConvTranspose upsampling
    (2x2 stride 2, and 4x4 stride 2 pad 1), skip Concats, a 1x1 conv to per-pixel logits.
    "image" [batch, 3, size, size] -> "logits" [batch, classes, size, size]."""
    g = _Graph(seed)
    enc1 = _double(g, "image", 3, 16, "enc1")
    enc2 = _double(g, g.node("MaxPool", [enc1], "pool1", kernel_shape=[2, 2], strides=[2, 2]), 16, 32, "enc2")
    middle = _double(g, g.node("MaxPool", [enc2], "pool2", kernel_shape=[2, 2], strides=[2, 2]), 32, 64, "middle")
    up2 = _transposed(g, middle, 64, 32, 2, "up2")
    dec2 = _double(g, g.node("Concat", [up2, enc2], "cat2", axis=1), 64, 32, "dec2")
    up1 = _transposed(g, dec2, 32, 16, 4, "up1", pad=1)
    dec1 = _double(g, g.node("Concat", [up1, enc1], "cat1", axis=1), 32, 16, "dec1")
    weight = g.normal("head.weight", (classes, 16, 1, 1), np.sqrt(1.0 / 16))
    g.node("Conv", [dec1, weight, g.normal("head.bias", classes, 0.1)], "head", output="logits", kernel_shape=[1, 1])
    return g.model("unet", [helper.make_tensor_value_info("image", TensorProto.FLOAT, [batch, 3, size, size])],
                   [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [batch, classes, size, size])])


def _bidirectional_lstm(g: _Graph, x: str, features: int, hidden: int, name: str) -> str:
    """An ONNX bidirectional LSTM over [time, batch, features] -> [time, batch, 2 * hidden]."""
    scale = np.sqrt(1.0 / hidden)
    w = g.uniform(f"{name}.W", (2, 4 * hidden, features), -scale, scale)
    r = g.uniform(f"{name}.R", (2, 4 * hidden, hidden), -scale, scale)
    b = g.uniform(f"{name}.B", (2, 8 * hidden), -scale, scale)
    y = g.node("LSTM", [x, w, r, b], name, direction="bidirectional", hidden_size=hidden)  # [T, 2, B, H]
    y = g.node("Transpose", [y], f"{name}.transpose", perm=[0, 2, 1, 3])
    return g.reshape(y, [0, 0, 2 * hidden], f"{name}.merge")


def crnn(batch: int | str = "batch", width: int = 100, classes: int = 37, seed: int = 0) -> onnx.ModelProto:
    """A CRNN text recognizer: conv+BN+ReLU and max-pools taking a 32-pixel-high line to height 1,
    the width as time steps, two bidirectional LSTMs, a projection to character classes and a
    softmax. "image" [batch, 1, 32, width] -> "probabilities" [width / 4, batch, classes]."""
    g = _Graph(seed)
    x, channels = "image", 1
    for i, (c_out, pool) in enumerate([(16, (2, 2)), (32, (2, 2)), (64, (2, 1)), (64, (2, 1)), (64, (2, 1))]):
        x = _cbr(g, x, channels, c_out, f"conv{i}")
        x = g.node("MaxPool", [x], f"pool{i}", kernel_shape=list(pool), strides=list(pool))
        channels = c_out
    axis = g.add_initializer("squeeze.axes", np.array([2], np.int64))
    x = g.node("Transpose", [g.node("Squeeze", [x, axis], "squeeze")], "to_time", perm=[2, 0, 1])  # [T, B, C]
    x = _bidirectional_lstm(g, x, channels, 32, "rnn1")
    x = _bidirectional_lstm(g, x, 64, 32, "rnn2")
    logits = g.linear(x, 64, classes, "fc")
    g.node("Softmax", [logits], "softmax", output="probabilities", axis=2)
    steps = width // 4
    return g.model("crnn", [helper.make_tensor_value_info("image", TensorProto.FLOAT, [batch, 1, 32, width])],
                   [helper.make_tensor_value_info("probabilities", TensorProto.FLOAT, [steps, batch, classes])])


def _conv_prelu(g: _Graph, x: str, c_in: int, c_out: int, kernel: int, name: str) -> str:
    """A valid (unpadded) conv with a bias, then PRelu with a slope per channel."""
    fan_in = c_in * kernel * kernel
    w = g.normal(f"{name}.weight", (c_out, c_in, kernel, kernel), np.sqrt(2.0 / fan_in))
    y = g.node("Conv", [x, w, g.normal(f"{name}.bias", c_out, 0.1)], name, kernel_shape=[kernel, kernel])
    slope = g.uniform(f"{name}.slope", (c_out, 1, 1), 0.05, 0.3)
    return g.node("PRelu", [y, slope], f"{name}.prelu")


_CASCADE = {  # per net: input side, [(channels, kernel, pool kernel, pool stride) ...], dense width
    "pnet": (None, [(10, 3, 2, 2), (16, 3, 0, 0), (32, 3, 0, 0)], None),
    "rnet": (24, [(28, 3, 3, 2), (48, 3, 3, 2), (64, 2, 0, 0)], 128),
    "onet": (48, [(32, 3, 3, 2), (64, 3, 3, 2), (64, 3, 2, 2), (128, 2, 0, 0)], 256),
}


def face_cascade(net: str = "rnet", batch: int | str = "batch", height: int = 240, width: int = 320,
                 seed: int = 0) -> onnx.ModelProto:
    """One net of an MTCNN-style face detector as TensorFlow exports it: NHWC images, a
    Transpose to NCHW, valid convs with PRelu and max-pools; "pnet" is fully convolutional
    (any image: `height` x `width`) with 1x1 conv heads, "rnet" (24x24 crops) and "onet" (48x48)
    flatten channels-last (a Transpose, then Flatten) into a dense layer with PRelu and dense
    heads. Outputs "prob" (2-way softmax) and "box" (4 offsets)."""
    side, convs, dense = _CASCADE[net]
    g = _Graph(seed)
    h, w = (height, width) if side is None else (side, side)
    x = g.node("Transpose", ["image"], "to_nchw", perm=[0, 3, 1, 2])
    channels = 3
    for i, (c_out, kernel, pool, stride) in enumerate(convs):
        x = _conv_prelu(g, x, channels, c_out, kernel, f"conv{i}")
        h, w, channels = h - kernel + 1, w - kernel + 1, c_out
        if pool:
            x = g.node("MaxPool", [x], f"pool{i}", kernel_shape=[pool, pool], strides=[stride, stride],
                       pads=[0, 0, (-(h - pool)) % stride, (-(w - pool)) % stride])  # TF's SAME-ceil pool
            h, w = -(-(h - pool) // stride) + 1, -(-(w - pool) // stride) + 1
    if dense is None:
        g.node("Softmax", [g.conv(x, channels, 2, 1, "prob.conv")], "prob", axis=1)
        g.node("Identity", [g.conv(x, channels, 4, 1, "box.conv")], "box")
        out_shape = [batch, None, None, None]
    else:
        flat = g.node("Flatten", [g.node("Transpose", [x], "to_nhwc", perm=[0, 2, 3, 1])], "flatten", axis=1)
        features = channels * h * w
        weight = g.normal("fc.weight", (features, dense), np.sqrt(2.0 / features))
        hidden = g.node("Add", [g.node("MatMul", [flat, weight], "fc.matmul"), g.normal("fc.bias", dense, 0.1)], "fc")
        hidden = g.node("PRelu", [hidden, g.uniform("fc.slope", dense, 0.05, 0.3)], "fc.prelu")
        g.node("Softmax", [g.linear(hidden, dense, 2, "prob.fc")], "prob", axis=1)
        g.node("Identity", [g.linear(hidden, dense, 4, "box.fc")], "box")
        out_shape = [batch, None]
    image = [batch, height, width, 3] if side is None else [batch, side, side, 3]
    return g.model(f"face_cascade_{net}", [helper.make_tensor_value_info("image", TensorProto.FLOAT, image)],
                   [helper.make_tensor_value_info("prob", TensorProto.FLOAT, out_shape),
                    helper.make_tensor_value_info("box", TensorProto.FLOAT, out_shape)])
