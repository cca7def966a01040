"""`clip(x, lo, hi)` as `minimum(maximum(x, lo), hi)` with scalar constants.

TVM's layout conversion has no rule for `clip` (its bounds are not tensors), so a blocked conv
followed by relu6 would convert back to NCHW for the clip; maximum and minimum with scalars
follow any layout. An infinite bound is left out.
"""

from __future__ import annotations

import math

import tvm
from tvm import relax

from .relax_helpers import dtype, is_op, rebind_pass


def ClipToMinMax() -> tvm.transform.Pass:
    return rebind_pass("tvm_fuse.ClipToMinMax", _plan)


def _plan(func: relax.Function) -> dict[relax.Var, relax.Expr]:
    plan = {}
    for var, value in relax.analysis.get_var2val(func).items():
        if not is_op(value, "relax.clip") or not dtype(value).startswith("float"):
            continue
        x, low, high = value.args
        bounds = [_float(low), _float(high)]
        if None in bounds or bounds == [-math.inf, math.inf]:
            continue
        result = x
        if bounds[0] != -math.inf:
            result = relax.op.maximum(result, relax.const(bounds[0], dtype(value)))
        if bounds[1] != math.inf:
            result = relax.op.minimum(result, relax.const(bounds[1], dtype(value)))
        plan[var] = result
    return plan


def _float(bound) -> float | None:
    """A constant bound's value (an IntImm or FloatImm, or a PrimValue holding one), else None."""
    value = getattr(bound, "value", bound)
    value = getattr(value, "value", value)
    return float(value) if isinstance(value, int | float) else None
