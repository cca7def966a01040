"""Move a `layout_transform` below the elementwise ops that follow it.

Where a blocked chain ends at a graph output, TVM's layout conversion converts back to NCHW
before the chain's last elementwise ops (an activation, say), which cuts them off from the conv
they should fuse into. Elementwise ops with scalar operands commute with any layout, so the
transform moves after them: `op(layout_transform(x))` -> `layout_transform(op(x))`.
"""

from __future__ import annotations

import tvm
import tvm_ffi
from tvm import relax

from ..compute.epilogue import ELEMENTWISE
from .relax_helpers import is_op, rebind_pass, scalar_operand, use_counts


def SinkLayoutTransforms() -> tvm.transform.Pass:
    sink = rebind_pass("tvm_fuse.SinkLayoutTransforms", _plan)

    @tvm.transform.module_pass(opt_level=0, name="tvm_fuse.SinkLayoutTransforms")
    def sink_all(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        while True:  # one op per round, until no transform has an elementwise op below it
            sunk = sink(mod)
            if tvm_ffi.structural_equal(sunk, mod):
                return sunk
            mod = sunk

    return sink_all


def _plan(func: relax.Function) -> dict[relax.Var, relax.Expr]:
    values = relax.analysis.get_var2val(func)
    uses = use_counts(func)
    plan = {}
    for var, value in values.items():
        if not (isinstance(value, relax.Call) and isinstance(value.op, tvm.ir.Op) and value.op.name in ELEMENTWISE):
            continue
        tensors = [a for a in value.args if isinstance(a, relax.Var)]
        scalars_only = all(isinstance(a, relax.Var) or scalar_operand(a) for a in value.args)
        if len(tensors) != 1 or not scalars_only:
            continue
        (moved,) = tensors
        transform = values.get(moved)
        if not is_op(transform, "relax.layout_transform") or uses[moved] != 1:
            continue
        inner = relax.Call(value.op, [transform.args[0] if a.same_as(moved) else a for a in value.args],
                           value.attrs, value.ty_args)
        plan[var] = relax.Call(transform.op, [inner], transform.attrs, transform.ty_args, transform.span)
    return plan

