"""`leakyrelu(x, alpha)` as `maximum(x, x * alpha)` for 0 <= alpha <= 1.

TVM's layout conversion has no rule for `nn.leakyrelu`, so a blocked conv followed by a leaky
ReLU and a residual add converted back to NCHW before the add, which then could not join the
conv's kernel; maximum and multiply by a scalar follow any layout. Other slopes (where
`x * alpha` is the larger) are left as they are.
"""

from __future__ import annotations

import tvm
from tvm import relax

from .rebind import dtype, is_op, rebind_pass


def LeakyReluToMax() -> tvm.transform.Pass:
    return rebind_pass("tvm_fuse.LeakyReluToMax", _plan)


def _plan(func: relax.Function) -> dict[relax.Var, relax.Expr]:
    plan = {}
    for var, value in relax.analysis.get_var2val(func).items():
        if not is_op(value, "relax.nn.leakyrelu") or not dtype(value).startswith("float"):
            continue
        alpha = float(value.attrs.alpha)
        if 0.0 <= alpha <= 1.0:
            x = value.args[0]
            plan[var] = relax.op.maximum(x, relax.op.multiply(x, relax.const(alpha, dtype(value))))
    return plan
