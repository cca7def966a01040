"""The `light_*` models that ship in the `onnx` wheel, with meaningful weights.

The wheel's copies are real architectures whose weights are placeholders: every weight is a
`ConstantOfShape` filled with 0.02, mixed with a few real BatchNorm statistics. Run as they are,
they produce activations up to 1e6 and one-hot outputs, so comparing two runtimes on them proves
little. `light_model` swaps every float weight for a seeded draw that suits its role (He-normal
conv weights, sane BatchNorm statistics), which keeps activations in a normal range.
"""

from __future__ import annotations

import collections
from pathlib import Path

import numpy as np
import onnx
from onnx import helper, numpy_helper

LIGHT_MODELS = (
    "bvlc_alexnet",
    "densenet121",
    "inception_v1",
    "inception_v2",
    "resnet50",
    "shufflenet",
    "squeezenet",
    "vgg19",
    "zfnet512",
)


def light_model_path(name: str) -> Path:
    """Path of the wheel's `light_<name>.onnx` (placeholder weights)."""
    if name not in LIGHT_MODELS:
        raise ValueError(f"unknown light model {name!r}; choose one of {', '.join(LIGHT_MODELS)}")
    return Path(onnx.__file__).parent / "backend" / "test" / "data" / "light" / f"light_{name}.onnx"


def light_model(name: str, seed: int = 0) -> onnx.ModelProto:
    """The wheel's `light_<name>` model with its float weights drawn from `seed`."""
    model = onnx.load(str(light_model_path(name)))
    reseed_weights(model, seed)
    return model


def _draw(rng, role: tuple[str, int], shape: list[int], node, residual: bool) -> np.ndarray:
    """Values for a weight of `shape` consumed as input `role[1]` of op `role[0]` (`node`);
    `residual` says the node's output feeds a residual sum."""
    op, index = role
    if op == "BatchNormalization" and index == 1 and residual:
        # Small scales on residual branches, as in zero-init ResNets: without them the variance
        # doubles at every residual sum and the softmax saturates to one-hot.
        return rng.uniform(0.1, 0.3, shape)
    if op == "Conv" and index == 1:  # He-normal keeps the variance through conv + ReLU
        return rng.normal(0.0, np.sqrt(2.0 / np.prod(shape[1:])), shape)
    if op == "Gemm" and index == 1:
        trans_b = any(a.name == "transB" and a.i for a in node.attribute)
        fan_in = shape[1] if trans_b else shape[0]
        return rng.normal(0.0, np.sqrt(1.0 / fan_in), shape)
    if (op == "BatchNormalization" and index in (1, 4)) or op == "Mul":
        return rng.uniform(0.5, 1.5, shape)  # scale and variance: positive, near 1
    return rng.normal(0.0, 0.1, shape)  # biases, shifts and means


def reseed_weights(model: onnx.ModelProto, seed: int) -> None:
    """Replace, in place, each float weight that feeds a Conv, Gemm, BatchNormalization or a
    per-channel Mul/Add with a seeded draw; weights made by ConstantOfShape become initializers."""
    graph = model.graph
    rng = np.random.default_rng(seed)
    initializers = {t.name: t for t in graph.initializer}
    consumers = collections.defaultdict(list)
    for node in graph.node:
        for index, name in enumerate(node.input):
            consumers[name].append((node, index))

    def role_of(name: str):
        uses = consumers.get(name, [])
        if len(uses) != 1:
            return None
        node, index = uses[0]
        if node.op_type == "Unsqueeze":  # per-channel scale/shift reshaped for broadcasting
            return role_of(node.output[0])
        if node.op_type in ("Conv", "Gemm", "BatchNormalization", "Mul", "Add") and index > 0:
            return (node.op_type, index), node
        return None

    weights = {}  # name -> shape of each float weight to redraw
    for tensor in graph.initializer:
        if tensor.data_type == onnx.TensorProto.FLOAT:
            weights[tensor.name] = list(tensor.dims)
    filled = [n for n in graph.node if n.op_type == "ConstantOfShape" and n.input[0] in initializers]
    for node in filled:
        weights[node.output[0]] = numpy_helper.to_array(initializers[node.input[0]]).tolist()

    redrawn = {}
    for name, shape in weights.items():
        found = role_of(name)
        if found is not None:
            role, node = found
            residual = any(c.op_type in ("Sum", "Add") for c, _ in consumers[node.output[0]])
            redrawn[name] = _draw(rng, role, shape, node, residual).astype(np.float32)

    filled = [n for n in filled if n.output[0] in redrawn]
    for node in filled:
        graph.node.remove(node)
    shape_inputs = {n.input[0] for n in filled}
    still_used = {name for node in graph.node for name in node.input}
    dropped = {name for name in shape_inputs if name not in still_used}
    kept = [t for t in graph.initializer if t.name not in redrawn and t.name not in dropped]
    del graph.initializer[:]
    graph.initializer.extend(kept)
    graph.initializer.extend(numpy_helper.from_array(v, name) for name, v in redrawn.items())

    # IR version 3 lists every initializer among the graph inputs as well.
    listed = [i for i in graph.input if i.name not in dropped]
    listed_names = {i.name for i in listed}
    if model.ir_version < 4:
        listed += [
            helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, v.shape)
            for name, v in redrawn.items()
            if name not in listed_names
        ]
    del graph.input[:]
    graph.input.extend(listed)
