"""`leakyrelu(x, alpha)` as `maximum(x, x * alpha)` for 0 <= alpha <= 1, and a PRelu whose
slopes are constants in [0, 1] as `maximum(x, x * slopes)`, the slopes a constant along the
PRelu's axis.

TVM's layout conversion has no rule for `nn.leakyrelu` or `nn.prelu`, so a blocked conv
followed by either converted back to NCHW before it, and the activation could not join the
conv's kernel as its epilogue; maximum and multiply by a constant follow any layout. Other
slopes (where `x * alpha` is the larger) are left as they are.
"""

from __future__ import annotations

import tvm
from tvm import relax
from tvm.ir.expr import GenericConst

from .relax_helpers import dtype, is_op, rebind_pass


def SlopesToMax() -> tvm.transform.Pass:
    return rebind_pass("tvm_fuse.SlopesToMax", _plan)


def _slopes(call: relax.Call) -> relax.Expr | None:
    """The constant `x * slopes` broadcasts with, where every slope is in [0, 1]; else None."""
    if is_op(call, "relax.nn.leakyrelu"):
        alpha = float(call.attrs.alpha)
        return relax.const(alpha, dtype(call)) if 0.0 <= alpha <= 1.0 else None
    x, slope = call.args
    if not isinstance(slope, GenericConst) or x.ty.ndim < 1:
        return None
    values = slope.value.numpy()
    if not ((values >= 0) & (values <= 1)).all():
        return None
    axis = int(call.attrs.axis) % x.ty.ndim
    return relax.const(values.reshape(values.shape + (1,) * (x.ty.ndim - 1 - axis)).astype(dtype(call)))


def _plan(func: relax.Function) -> dict[relax.Var, relax.Expr]:
    plan = {}
    for var, value in relax.analysis.get_var2val(func).items():
        if not (is_op(value, "relax.nn.leakyrelu") or is_op(value, "relax.nn.prelu")) or not dtype(value).startswith("float"):
            continue
        slopes = _slopes(value)
        if slopes is not None:
            x = value.args[0]
            plan[var] = relax.op.maximum(x, relax.op.multiply(x, slopes))
    return plan
