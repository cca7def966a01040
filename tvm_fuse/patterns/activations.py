"""Activations a fused kernel applies in its epilogue, each as the Relax form(s) TVM's ONNX
importer produces for it. The kernel computes whatever ops matched, so a pattern only has to
recognise an activation's shape, not check its constants."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from tvm.relax.dpl import DFPattern, is_const, is_op, wildcard


def _op(name: str, *args: DFPattern) -> DFPattern:
    return is_op(f"relax.{name}")(*args)


def _either(name: str, a: DFPattern, b: DFPattern) -> DFPattern:
    """A commutative binary op, operands in either order."""
    return _op(name, a, b) | _op(name, b, a)


def _gelu_erf(x):
    """x * (1 + erf(x / sqrt 2)) * 0.5 as torch exports it, or (x * 0.5) * (1 + erf(...)) as
    Hugging Face's Python gelu does."""
    one_plus_erf = _either("add", _op("erf", _op("divide", x, is_const()) | _either("multiply", x, is_const())),
                           is_const())
    whole = _either("multiply", x, one_plus_erf)
    return _either("multiply", whole, is_const()) | _either("multiply", _either("multiply", x, is_const()), one_plus_erf)


def _gelu_tanh(x):  # 0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3)))
    cube = _op("power", x, is_const()) | _either("multiply", _either("multiply", x, x), x)
    inner = _either("multiply", is_const(), _either("add", x, _either("multiply", is_const(), cube)))
    one_plus = _either("add", is_const(), _op("tanh", inner))
    return _either("multiply", _either("multiply", is_const(), x), one_plus) | _either(
        "multiply", x, _either("multiply", is_const(), one_plus)
    )


def _softplus(x):  # TVM's stable form: max(x, 0) + log(1 + exp(-|x|))
    tail = _op("log", _either("add", is_const(), _op("exp", _op("negative", _op("abs", x)))))
    return _either("add", _op("maximum", x, is_const()), tail)


def _clip(x):
    """clip(x, lo, hi), or the maximum / minimum form `ClipToMinMax` gives it."""
    return (_op("clip", x, wildcard(), wildcard())
            | _op("minimum", _op("maximum", x, is_const()), is_const())
            | _op("maximum", _op("minimum", x, is_const()), is_const()))


def _hardsigmoid(x):  # clip(alpha * x + beta, 0, 1)
    return _clip(_either("add", _either("multiply", is_const(), x), is_const()))


@dataclass(frozen=True)
class Activation:
    name: str
    pattern: Callable[[DFPattern], DFPattern]  # input pattern -> activation output pattern


ACTIVATIONS = (
    # Most specific first: dpl takes the first alternative that matches, and hardsigmoid
    # would otherwise parse as a scale/shift followed by a plain clip.
    # x * (clip(x + 3, 0, 6) / 6) as torch exports it, (x * clip(x + 3, 0, 6)) / 6 as paddle2onnx
    # does, or x * HardSigmoid(x) (PP-LCNet's)
    Activation("hardswish", lambda x: _either("multiply", x, _op("divide", _clip(_either("add", x, is_const())), is_const()))
               | _op("divide", _either("multiply", x, _clip(_either("add", x, is_const()))), is_const())
               | _either("multiply", x, _hardsigmoid(x))),
    Activation("hardsigmoid", _hardsigmoid),
    Activation("relu", lambda x: _op("nn.relu", x)),
    # relu6 and any clip; one-sided ones are a lone maximum or minimum
    Activation("clip", lambda x: _clip(x) | _op("maximum", x, is_const()) | _op("minimum", x, is_const())),
    # or max(x, alpha * x), the form `SlopesToMax` gives it (and a PRelu with slopes in [0, 1])
    Activation("leaky_relu", lambda x: _op("nn.leakyrelu", x) | _either("maximum", x, _either("multiply", x, is_const()))),
    Activation("sigmoid", lambda x: _op("sigmoid", x)),
    Activation("tanh", lambda x: _op("tanh", x)),
    Activation("softplus", lambda x: _op("nn.softplus", x) | _softplus(x)),  # MXNet's SoftReLU
    Activation("gelu", lambda x: _op("nn.gelu", x) | _gelu_erf(x)),
    Activation("gelu_tanh", lambda x: _op("nn.gelu_tanh", x) | _gelu_tanh(x)),
    Activation("silu", lambda x: _op("nn.silu", x) | _either("multiply", x, _op("sigmoid", x))),  # swish
)
