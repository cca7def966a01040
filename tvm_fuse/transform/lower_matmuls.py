"""Give the matrix products the fusion table leaves alone (both operands computed at run
time, as attention's `Q @ K^T` and `scores @ V`) our scheduled matmul kernel instead of TVM's
unscheduled loop nest. They stay kernels of their own: with no constant weight there is
nothing to pack, and the table fuses post-ops only into anchors with constant weights."""

from __future__ import annotations

import tvm
from tvm import relax

from ..compute.matmul import matmul
from ..ir_names import KERNEL_ATTR, OP_PATTERN_ATTR, OPAQUE
from .relax_helpers import mutate_functions


@relax.expr_functor.mutator
class _MatmulLowerer(relax.PyExprMutator):
    def visit_var_binding_(self, binding: relax.VarBinding) -> None:
        value = binding.value
        if not (isinstance(value, relax.Call) and value.op.same_as(tvm.ir.Op.get("relax.matmul"))
                and _lowerable(value)):
            return super().visit_var_binding_(binding)
        kernel = self.builder_.call_te(matmul, *value.args, primfunc_name_hint="matmul",
                                       primfunc_attrs={KERNEL_ATTR: "matmul", OP_PATTERN_ATTR: OPAQUE})
        self.builder_.emit_normalized(relax.VarBinding(binding.var, self.builder_.normalize(kernel)))


def _lowerable(call: relax.Call) -> bool:
    x, y = call.args
    return all(a.ty.ndim >= 2 and str(a.ty.dtype) == "float32" for a in (x, y)) and str(call.ty.dtype) == "float32"


def LowerMatmuls() -> tvm.transform.Pass:
    @tvm.transform.module_pass(opt_level=0, name="tvm_fuse.LowerMatmuls")
    def lower(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        lowerer = _MatmulLowerer(mod)
        return mutate_functions(mod, lowerer, lowerer.visit_expr)

    return lower
