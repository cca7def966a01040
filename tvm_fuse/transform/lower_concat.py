"""Lower each concat of static shape to TVM's concatenate kernel marked with its axis
(`CONCAT_AXIS_ATTR`), so that `ConcatInPlace` can tell a kernel that only concatenates from
one that TVM's fusion later merged with other work. The kernel is TVM's own
(`topi.concatenate`), scheduled by the generic schedule where it still runs."""

from __future__ import annotations

import tvm
from tvm import relax, topi

from ..ir_names import CONCAT_AXIS_ATTR
from .relax_helpers import mutate_functions, static_shape


@relax.expr_functor.mutator
class _ConcatLowerer(relax.PyExprMutator):
    def visit_var_binding_(self, binding: relax.VarBinding) -> None:
        value = binding.value
        if not (isinstance(value, relax.Call) and value.op.same_as(tvm.ir.Op.get("relax.concat"))
                and _static(value)):
            return super().visit_var_binding_(binding)
        axis = int(value.attrs.axis) % value.ty.ndim
        kernel = self.builder_.call_te(lambda *inputs: topi.concatenate(inputs, axis), *value.args[0].fields,
                                       primfunc_name_hint="concatenate",
                                       primfunc_attrs={CONCAT_AXIS_ATTR: axis})
        self.builder_.emit_normalized(relax.VarBinding(binding.var, self.builder_.normalize(kernel)))


def _static(call: relax.Call) -> bool:
    """A tuple of inputs joined along an axis, every input and the output of known shape."""
    if not isinstance(call.args[0], relax.Tuple) or call.attrs.axis is None:
        return False
    return all(static_shape(expr) is not None for expr in [*call.args[0].fields, call])


def LowerConcat() -> tvm.transform.Pass:
    @tvm.transform.module_pass(opt_level=0, name="tvm_fuse.LowerConcat")
    def lower(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        lowerer = _ConcatLowerer(mod)
        return mutate_functions(mod, lowerer, lowerer.visit_expr)

    return lower
