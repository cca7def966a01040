"""exp, erf, tanh and softmax as TVM's vectorizable approximations: the exact ones are a scalar
libm call per element (ONNX Runtime approximates them too).

TVM's own `FastMathTransform` reads `call.op.name` of every call and so crashes on a call of a
VM builtin (`vm.builtin.tensor_to_shape`, from an Expand to a shape computed at run time),
whose op is an `ExternFunc`; this one leaves such calls alone.
"""

from __future__ import annotations

import tvm
from tvm import relax, topi
from tvm.relax import PyExprMutator, expr_functor

_FAST = {  # op -> its approximation, called with the op's argument (and attributes)
    "relax.exp": lambda call: (topi.fast_exp, call.args[0]),
    "relax.erf": lambda call: (topi.fast_erf, call.args[0]),
    "relax.tanh": lambda call: (topi.fast_tanh, call.args[0]),
    "relax.nn.softmax": lambda call: (topi.nn.fast_softmax, call.args[0], call.attrs.axis),
}


@expr_functor.mutator
class _FastMath(PyExprMutator):
    def visit_call_(self, call: relax.Call) -> relax.Expr:
        fast = _FAST.get(call.op.name) if isinstance(call.op, tvm.ir.Op) else None
        if fast is None:
            return super().visit_call_(call)
        return self.builder_.call_te(*fast(call))


@tvm.transform.module_pass(opt_level=0, name="tvm_fuse.FastMath")
def FastMath(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
    mutator = _FastMath(mod)
    for var, func in mod.functions_items():
        if isinstance(func, relax.Function):
            mutator.builder_.update_func(var, mutator.visit_expr(func))
    return mutator.builder_.get()
