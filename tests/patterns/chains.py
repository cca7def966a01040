"""Minimal Relax graphs for the fusion table: an anchor followed by a chain of post-ops,
every binding named after an ONNX node index as the importer names them."""

from __future__ import annotations

import numpy as np
import tvm
from tvm import relax

from tvm_fuse import provenance

_RNG = np.random.default_rng(0)

# anchor -> (input shape, weight shape, emit(x, w) -> call, channel axis)
ANCHORS = {
    "conv2d": ((1, 8, 6, 6), (8, 8, 3, 3), lambda x, w: relax.op.nn.conv2d(x, w, padding=1), 1),
    "depthwise_conv2d": ((1, 8, 6, 6), (8, 1, 3, 3), lambda x, w: relax.op.nn.conv2d(x, w, padding=1, groups=8), 1),
    "group_conv2d": ((1, 8, 6, 6), (8, 4, 3, 3), lambda x, w: relax.op.nn.conv2d(x, w, padding=1, groups=2), 1),
    "conv1d": ((1, 8, 10), (8, 8, 3), lambda x, w: relax.op.nn.conv1d(x, w, padding=1), 1),
    "dense": ((2, 16), (16, 8), relax.op.matmul, -1),
    "batch_matmul": ((2, 3, 16), (2, 16, 8), relax.op.matmul, -1),
}


def const(*shape) -> relax.Expr:
    return relax.const(_RNG.standard_normal(shape).astype("float32"))


def _c(value: float) -> relax.Expr:
    return relax.const(value, "float32")


# activation -> emit(bb, name, x) -> var; the forms TVM's ONNX importer produces
ACTIVATIONS = {
    "relu": lambda bb, n, x: bb.emit(relax.op.nn.relu(x), n),
    "clip": lambda bb, n, x: bb.emit(relax.op.clip(x, 0.0, 6.0), n),
    "leaky_relu": lambda bb, n, x: bb.emit(relax.op.nn.leakyrelu(x, 0.1), n),
    "sigmoid": lambda bb, n, x: bb.emit(relax.op.sigmoid(x), n),
    "tanh": lambda bb, n, x: bb.emit(relax.op.tanh(x), n),
    "softplus": lambda bb, n, x: bb.emit(relax.op.add(
        bb.emit(relax.op.maximum(x, _c(0)), n),
        bb.emit(relax.op.log(bb.emit(relax.op.add(_c(1), bb.emit(relax.op.exp(
            bb.emit(relax.op.negative(bb.emit(relax.op.abs(x), n)), n)), n)), n)), n)), n),
    "gelu": lambda bb, n, x: bb.emit(relax.op.multiply(bb.emit(relax.op.multiply(x, bb.emit(relax.op.add(
        bb.emit(relax.op.erf(bb.emit(relax.op.divide(x, _c(1.4142135)), n)), n), _c(1)), n)), n), _c(0.5)), n),
    "gelu_tanh": lambda bb, n, x: bb.emit(relax.op.nn.gelu_tanh(x), n),
    "silu": lambda bb, n, x: bb.emit(relax.op.multiply(x, bb.emit(relax.op.sigmoid(x), n)), n),
    "hardswish": lambda bb, n, x: bb.emit(relax.op.multiply(x, bb.emit(relax.op.divide(
        bb.emit(relax.op.clip(bb.emit(relax.op.add(x, _c(3)), n), 0.0, 6.0), n), _c(6)), n)), n),
    "hardsigmoid": lambda bb, n, x: bb.emit(relax.op.clip(bb.emit(relax.op.add(
        bb.emit(relax.op.multiply(_c(0.2), x), n), _c(0.5)), n), 0.0, 1.0), n),
}


def chain(anchor: str, steps: list[str], *, extra_use: int | None = None, sum_shape=None,
          constant_weight: bool = True) -> tvm.IRModule:
    """`main(x[, w][, other])`: the anchor then `steps` (bias, bn, sum or an activation name).

    `extra_use=i` makes the output of step i (0 = the anchor) a second graph output, so it has a
    consumer outside the chain; `sum_shape` gives the residual operand another shape.
    """
    x_shape, w_shape, emit_anchor, axis = ANCHORS[anchor]
    x = relax.Var("x", relax.TensorType(x_shape, "float32"))
    params = [x]
    weight = const(*w_shape)
    if not constant_weight:
        weight = relax.Var("w", relax.TensorType(w_shape, "float32"))
        params.append(weight)
    return _build(params, x, weight, emit_anchor, axis, steps, extra_use, sum_shape)


def _build(params, x, weight, emit_anchor, axis, steps, extra_use, sum_shape):
    other = None
    if "sum" in steps:
        probe = relax.BlockBuilder().normalize(emit_anchor(x, weight))
        other = relax.Var("other", relax.TensorType(sum_shape or tuple(int(d) for d in probe.ty.shape), "float32"))
        params = [*params, other]
    bb = relax.BlockBuilder()
    with bb.function("main", params):
        with bb.dataflow():
            y = bb.emit(emit_anchor(x, weight), provenance.tag(0))
            outputs = [y] if extra_use == 0 else []
            channels = int(y.ty.shape[axis])
            per_channel = [1] * len(y.ty.shape)
            per_channel[axis] = channels
            for i, step in enumerate(steps, start=1):
                name = provenance.tag(i)
                if step == "bias":
                    y = bb.emit(relax.op.add(y, const(*per_channel)), name)
                elif step == "bn":
                    y = bb.emit(relax.op.add(bb.emit(relax.op.multiply(y, const(*per_channel)), name),
                                             const(*per_channel)), name)
                elif step == "sum":
                    y = bb.emit(relax.op.add(y, other), name)
                else:
                    y = ACTIVATIONS[step](bb, name, y)
                if extra_use == i:
                    outputs.append(y)
            result = bb.emit_output(relax.Tuple([y, *outputs]) if outputs else y)
        bb.emit_func_output(result)
    return bb.get()
