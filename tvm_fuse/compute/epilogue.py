"""Post-ops of a fused pattern as tensor expressions: one entry per Relax op a pattern may
contain after its anchor. Binary ops broadcast as numpy does. exp, erf, tanh and sigmoid are
vectorizable approximations (`fast_math.exp` and `sigmoid`; TVM's `fast_erf`, `fast_tanh`),
where the exact ones are a scalar libm call per element."""

from __future__ import annotations

from collections.abc import Callable

from tvm import te, topi

from .fast_math import exp, sigmoid, silu


def _scalar(value) -> float:
    return float(value.value) if hasattr(value, "value") else float(value)


# Relax op name -> builder(operands as te.Tensors or PrimValues, the call's attrs) -> te.Tensor.
ELEMENTWISE: dict[str, Callable] = {
    "relax.add": lambda a, attrs: topi.add(*a),
    "relax.subtract": lambda a, attrs: topi.subtract(*a),
    "relax.multiply": lambda a, attrs: topi.multiply(*a),
    "relax.divide": lambda a, attrs: topi.divide(*a),
    "relax.maximum": lambda a, attrs: topi.maximum(*a),
    "relax.minimum": lambda a, attrs: topi.minimum(*a),
    "relax.power": lambda a, attrs: topi.power(*a),
    "relax.negative": lambda a, attrs: topi.negative(*a),
    "relax.abs": lambda a, attrs: topi.abs(*a),
    "relax.exp": lambda a, attrs: exp(*a),
    "relax.log": lambda a, attrs: topi.log(*a),
    "relax.erf": lambda a, attrs: topi.fast_erf(*a),
    "relax.tanh": lambda a, attrs: topi.fast_tanh(*a),
    "relax.sigmoid": lambda a, attrs: sigmoid(*a),
    "relax.nn.relu": lambda a, attrs: topi.nn.relu(*a),
    "relax.nn.leakyrelu": lambda a, attrs: topi.nn.leaky_relu(a[0], float(attrs.alpha)),
    "relax.nn.silu": lambda a, attrs: silu(a[0]),
    "relax.nn.gelu": lambda a, attrs: _gelu(a[0]),
    "relax.nn.gelu_tanh": lambda a, attrs: _gelu_tanh(a[0]),
    "relax.nn.softplus": lambda a, attrs: _softplus(a[0], float(attrs.beta), float(attrs.threshold)),
    "relax.clip": lambda a, attrs: topi.clip(a[0], _scalar(a[1]), _scalar(a[2])),
}


def _gelu(x: te.Tensor) -> te.Tensor:
    """x * (1 + erf(x / sqrt(2))) / 2."""
    erf = topi.fast_erf(topi.multiply(x, 0.7071067811865476))
    return te.compute(x.shape, lambda *i: x(*i) * (0.5 + 0.5 * erf(*i)), name="gelu")


def _gelu_tanh(x: te.Tensor) -> te.Tensor:
    """x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3))) / 2."""

    inner = te.compute(x.shape, lambda *i: 0.7978845608028654 * (x(*i) + 0.044715 * x(*i) * x(*i) * x(*i)))
    tanh = topi.fast_tanh(inner)
    return te.compute(x.shape, lambda *i: 0.5 * x(*i) * (1.0 + tanh(*i)), name="gelu_tanh")


def _softplus(x: te.Tensor, beta: float, threshold: float) -> te.Tensor:
    """log(1 + exp(beta x)) / beta, or x itself where beta x > threshold (exp would overflow)."""

    def value(*i):
        v = x(*i)
        soft = te.log(1.0 + te.exp(beta * v)) / beta
        return te.if_then_else(beta * v > threshold, v, soft)

    return te.compute(x.shape, value, name="softplus")


def apply(op_name: str, operands: list, attrs):
    """The post-op `op_name` on `operands`; KeyError if no pattern may contain it."""
    return ELEMENTWISE[op_name](operands, attrs)
