"""Put first the operand of a residual add that only the add reads.

A `sum` post-op extends the chain of the operand whose value nothing else needs. In MobileNetV2
the block input also feeds the next block, so `add(block_input, project)` must fuse into the
`project` conv; the pattern matcher takes the first operand order that fits, before the
single-consumer check, so the order is made canonical here.
"""

from __future__ import annotations

import tvm
from tvm import relax

from .relax_helpers import is_op, rebind_pass, use_counts


def OrderResidualAdds() -> tvm.transform.Pass:
    return rebind_pass("tvm_fuse.OrderResidualAdds", _plan)


def _plan(func: relax.Function) -> dict[relax.Var, relax.Expr]:
    uses = use_counts(func)
    plan = {}
    for var, value in relax.analysis.get_var2val(func).items():
        if is_op(value, "relax.add"):
            first, second = value.args
            if isinstance(first, relax.Var) and isinstance(second, relax.Var) and uses[first] > 1 and uses[second] == 1:
                plan[var] = relax.op.add(second, first)
    return plan
