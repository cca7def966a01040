"""Powers by a constant multiple of 1/4 (LRN's x^-0.75, a norm's x^2 or x^0.5) as products and
square roots, which vectorize and are as exact as `powf` (a scalar libm call per element)."""

from __future__ import annotations

import tvm
from tvm import te

_ROOT_POWERS = 16  # exponents k/4 with |k| up to this: x^4 at most


def quarter_exponent_value(value: float) -> int | None:
    """k if `value` is k/4 with |k| <= _ROOT_POWERS (and k != 0), else None."""
    quarters = value * 4
    k = int(round(quarters))
    return k if quarters == k and 0 < abs(k) <= _ROOT_POWERS else None


def root_power(v: tvm.tirx.PrimExpr, quarters: int) -> tvm.tirx.PrimExpr:
    """v^(quarters/4) as v^n * sqrt(v)^a * sqrt(sqrt(v))^b (1 / that for a negative exponent):
    NaN for a negative v under a root, and infinities and signed zeros, as powf gives."""
    whole, rest = divmod(abs(quarters), 4)
    if rest:  # under a root, -0 counts as +0, whose powers are +0 or +inf as powf's are
        zero = tvm.tirx.const(0.0, str(v.ty))
        v = te.if_then_else(v == zero, zero, v)
    factors = [v] * whole + ([te.sqrt(v)] if rest >= 2 else []) + ([te.sqrt(te.sqrt(v))] if rest % 2 else [])
    product = factors[0]
    for factor in factors[1:]:
        product = product * factor
    return product if quarters > 0 else tvm.tirx.const(1.0, str(v.ty)) / product
