"""Each reshape of symbolic shape as the VM's reshape: a view of the same bytes, as TVM makes
of a static one. TVM lowers a reshape to a copy kernel and turns it back into a view only where
it can prove the kernel's index map the identity (`RewriteDataflowReshape`), which it cannot
over symbolic dims: each stayed a copy that divides every element's flat index by the dims."""

from __future__ import annotations

import tvm
from tvm import relax

from .relax_helpers import mutate_functions, static_shape


@relax.expr_functor.mutator
class _ReshapeViews(relax.PyExprMutator):
    def visit_call_(self, call: relax.Call) -> relax.Expr:
        call = super().visit_call_(call)
        if not call.op.same_as(tvm.ir.Op.get("relax.reshape")) or (
                static_shape(call) is not None and static_shape(call.args[0]) is not None):
            return call
        return relax.call_pure_packed("vm.builtin.reshape", call.args[0], call.args[1], ty_args=call.ty)


def SymbolicReshapesAsViews() -> tvm.transform.Pass:
    @tvm.transform.module_pass(opt_level=0, name="tvm_fuse.SymbolicReshapesAsViews")
    def rewrite(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        views = _ReshapeViews(mod)
        return mutate_functions(mod, views, views.visit_expr)

    return rewrite
