"""Local response normalization (ONNX `LRN`, AlexNet's and GoogLeNet's) as one kernel: each
pixel's window of `size` channels squared and summed where it is read, then the pixel scaled,
with no squared tensor, pooled copy or power kernel between. TVM's importer writes it as a 3-D
average pool over an expanded tensor: four kernels, a sixth of Inception-v1's run."""

from __future__ import annotations

from tvm import te, tirx

from ..ir_names import LRN_RULE, SCHEDULE_RULE
from .powers import quarter_exponent_value, root_power


def local_response_norm(x: te.Tensor, size: int, alpha: float, beta: float, bias: float) -> te.Tensor:
    """`x / (bias + alpha / size * sum of x[:, j]^2)^beta` over the channels j of axis 1 from
    c - floor((size - 1) / 2) to c + ceil((size - 1) / 2), those outside the tensor left out,
    as the ONNX operator's definition reads (any `size`, even ones too)."""
    channels, before = x.shape[1], (size - 1) // 2
    zero = tirx.const(0.0, x.dtype)

    def window_sum(n, c, *rest):
        total = zero
        for k in range(size):
            j = c + (k - before)
            # Clamped, so that a load outside the channels is never made, even where the
            # vectorized select evaluates both sides; the select drops it.
            pixel = x[(n, tirx.max(tirx.min(j, channels - 1), 0), *rest)]
            total = total + tirx.if_then_else(tirx.all(j >= 0, j < channels), pixel * pixel, zero)
        return tirx.const(bias, x.dtype) + tirx.const(alpha / size, x.dtype) * total

    quarters = quarter_exponent_value(-beta)

    def value(*i):
        scale = window_sum(*i)  # one expression: its copies below are one to LLVM
        if quarters is not None and quarters < 0 and bias > 0 and x.dtype == "float32":
            factor = _inverse_quarter_power(scale, -quarters)
        elif quarters is not None:
            factor = root_power(scale, quarters)
        else:
            factor = tirx.pow(scale, tirx.const(-beta, x.dtype))
        return x(*i) * factor

    return te.compute(x.shape, value, name="lrn", attrs={SCHEDULE_RULE: LRN_RULE})


# 2^23 * 1.25 * (127 - 0.0450466): a float's bits, shifted right by 2 and taken from this, are
# within 3.4% of the float's inverse fourth root (the inverse square root's trick, for -1/4).
_FOURTH_ROOT_MAGIC = 0x4F58CAE4
_NEWTON_STEPS = 3  # 3.4% -> 0.3% -> 2e-5 -> 1.5e-7 relative


def _inverse_quarter_power(v: tirx.PrimExpr, quarters: int) -> tirx.PrimExpr:
    """v^(-quarters/4) for a float32 v >= bias > 0 (0 for an infinite v, NaN for NaN), in
    multiplies and adds: Newton's steps on the inverse fourth root from its bit-trick estimate,
    raised to `quarters`. Within 6e-7 of `powf` (x^-0.75: 5.3e-7 over 1e-3..1e8); LRN's square
    roots and division took three quarters of its time."""
    # Each value bound once (`Let`): written out, every step would copy the last one thrice.
    v_var, steps = tirx.Var("scale", "float32"), []
    y = tirx.reinterpret("float32", tirx.const(_FOURTH_ROOT_MAGIC, "int32") - (tirx.reinterpret("int32", v_var) >> 2))
    for step in range(_NEWTON_STEPS):
        estimate = tirx.Var(f"root{step}", "float32")
        steps.append((estimate, y))
        square = estimate * estimate
        y = estimate * (tirx.const(1.25, "float32") - tirx.const(0.25, "float32") * v_var * square * square)
    root = tirx.Var("root", "float32")
    power = root
    for _ in range(quarters - 1):
        power = power * root
    body = tirx.if_then_else(v_var == tirx.const(float("inf"), "float32"), tirx.const(0.0, "float32"), power)
    body = tirx.Let(root, y, body)
    for var, value in reversed(steps):
        body = tirx.Let(var, value, body)
    return tirx.Let(v_var, v, body)
