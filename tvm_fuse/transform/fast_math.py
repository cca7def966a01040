"""exp, erf, tanh and softmax as TVM's vectorizable approximations: the exact ones are a scalar
libm call per element (ONNX Runtime approximates them too). A power by a constant multiple of
1/4 (LRN's x^0.75, a norm's x^2 or x^0.5) becomes products and square roots, which vectorize and
are as exact as `powf`; any other power stays a libm call.

TVM's own `FastMathTransform` reads `call.op.name` of every call and so crashes on a call of a
VM builtin (`vm.builtin.tensor_to_shape`, from an Expand to a shape computed at run time),
whose op is an `ExternFunc`; this one leaves such calls alone.
"""

from __future__ import annotations

import tvm
from tvm import relax, te, topi
from tvm.relax import PyExprMutator, expr_functor

from .rebind import same_type, scalar_value

_ROOT_POWERS = 16  # exponents k/4 with |k| up to this: x^4 at most


def quarter_exponent(exponent: relax.Expr) -> int | None:
    """k if `exponent` is a constant k/4 with |k| <= _ROOT_POWERS (and k != 0), else None."""
    value = scalar_value(exponent)
    if value is None:
        return None
    quarters = value * 4
    k = int(round(quarters))
    return k if quarters == k and 0 < abs(k) <= _ROOT_POWERS else None


def power_by_roots(x: te.Tensor, quarters: int) -> te.Tensor:
    """x^(quarters/4) as x^n * sqrt(x)^a * sqrt(sqrt(x))^b (1 / that for a negative exponent):
    NaN for a negative x under a root, and infinities and signed zeros, as powf gives."""
    whole, rest = divmod(abs(quarters), 4)

    def value(*i):
        v = x(*i)
        if rest:  # under a root, -0 counts as +0, whose powers are +0 or +inf as powf's are
            zero = tvm.tirx.const(0.0, x.dtype)
            v = te.if_then_else(v == zero, zero, v)
        factors = [v] * whole + ([te.sqrt(v)] if rest >= 2 else []) + ([te.sqrt(te.sqrt(v))] if rest % 2 else [])
        product = factors[0]
        for factor in factors[1:]:
            product = product * factor
        return product if quarters > 0 else tvm.tirx.const(1.0, x.dtype) / product

    return te.compute(x.shape, value, name="power")


def _power(call: relax.Call):
    quarters = quarter_exponent(call.args[1])
    if quarters is None or str(call.args[0].ty.dtype) not in ("float32", "float64") \
            or not same_type(call, call.args[0]):  # a 1-element exponent may broadcast x's shape
        return None
    return power_by_roots, call.args[0], quarters


_FAST = {  # op -> its approximation, called with the op's argument (and attributes); None: keep the op
    "relax.exp": lambda call: (topi.fast_exp, call.args[0]),
    "relax.erf": lambda call: (topi.fast_erf, call.args[0]),
    "relax.tanh": lambda call: (topi.fast_tanh, call.args[0]),
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
