"""exp, erf, tanh, sigmoid, SiLU and softmax as vectorizable approximations (ours, `compute.fast_math`, and TVM's): the exact
ones are a scalar libm call per element (ONNX Runtime approximates them too). A power by a
constant multiple of 1/4 (LRN's x^0.75, a norm's x^2 or x^0.5) becomes products and square
roots, which vectorize and are as exact as `powf`; any other power stays a libm call.

TVM's own `FastMathTransform` reads `call.op.name` of every call and so crashes on a call of a
VM builtin (`vm.builtin.tensor_to_shape`, from an Expand to a shape computed at run time),
whose op is an `ExternFunc`; this one leaves such calls alone.
"""

from __future__ import annotations

import tvm
from tvm import relax, te, topi
from tvm.relax import PyExprMutator, expr_functor

from ..compute.fast_math import exp, sigmoid, silu
from ..compute.powers import quarter_exponent_value, root_power
from .relax_helpers import same_type, scalar_value


def quarter_exponent(exponent: relax.Expr) -> int | None:
    """k if `exponent` is a constant k/4 with |k| <= _ROOT_POWERS (and k != 0), else None."""
    value = scalar_value(exponent)
    return None if value is None else quarter_exponent_value(value)


def power_by_roots(x: te.Tensor, quarters: int) -> te.Tensor:
    """x^(quarters/4), elementwise (`root_power`)."""
    return te.compute(x.shape, lambda *i: root_power(x(*i), quarters), name="power")


def _power(call: relax.Call):
    quarters = quarter_exponent(call.args[1])
    if quarters is None or str(call.args[0].ty.dtype) not in ("float32", "float64") \
            or not same_type(call, call.args[0]):  # a 1-element exponent may broadcast x's shape
        return None
    return power_by_roots, call.args[0], quarters


_FAST = {  # op -> its approximation, called with the op's argument (and attributes); None: keep the op
    "relax.exp": lambda call: (exp, call.args[0]),
    "relax.erf": lambda call: (topi.fast_erf, call.args[0]),
    "relax.tanh": lambda call: (topi.fast_tanh, call.args[0]),
    "relax.sigmoid": lambda call: (sigmoid, call.args[0]),
    "relax.nn.silu": lambda call: (silu, call.args[0]),
    "relax.nn.softmax": lambda call: (topi.nn.fast_softmax, call.args[0], call.attrs.axis),
    "relax.power": _power,
}


@expr_functor.mutator
class _FastMath(PyExprMutator):
    def visit_call_(self, call: relax.Call) -> relax.Expr:
        fast = _FAST.get(call.op.name) if isinstance(call.op, tvm.ir.Op) else None
        replacement = fast(call) if fast is not None else None
        if replacement is None:
            return super().visit_call_(call)
        return self.builder_.call_te(*replacement)


@tvm.transform.module_pass(opt_level=0, name="tvm_fuse.FastMath")
def FastMath(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
    mutator = _FastMath(mod)
    for var, func in mod.functions_items():
        if isinstance(func, relax.Function):
            mutator.builder_.update_func(var, mutator.visit_expr(func))
    return mutator.builder_.get()
