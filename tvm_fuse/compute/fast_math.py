"""Elementwise functions TVM lowers to a scalar libm call per element (`expf` 16 times per
vector), built instead on its vectorizable approximations (`topi.fast_exp`, `fast_tanh`):
a conv + SiLU kernel took 1.9x a conv + ReLU one with the libm calls (Zen 4)."""

from __future__ import annotations

from tvm import te, topi


def sigmoid(x: te.Tensor) -> te.Tensor:
    """1 / (1 + exp(-x)); exp's approximation saturates at +-88, where sigmoid is 0 or 1."""
    exps = topi.fast_exp(topi.negative(x))
    return te.compute(x.shape, lambda *i: 1.0 / (1.0 + exps(*i)), name="sigmoid")


def silu(x: te.Tensor) -> te.Tensor:
    """x * sigmoid(x)."""
    return topi.multiply(x, sigmoid(x))
