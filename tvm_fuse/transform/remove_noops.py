"""Bindings that return their input unchanged are dropped; their readers read the input.

ONNX exporters leave such ops behind: a Reshape or Expand to the shape a tensor already has, a
Cast to its own type, an Unsqueeze undone by a Squeeze, a multiply by ones or add of zeros, and
Dropout, which does nothing at inference (its tuple output also trips TVM's layout conversion). Some
cost a pass over the tensor at run time, and all of them split what the fusion patterns would
match (a conv followed by a no-op reshape is no longer a conv followed by its bias add).

A variable seen outside its dataflow block (the function's output) is kept, bound to the input
(`output = input`), so the function still returns a variable with its name. Provenance: nothing
new is bound; a removed no-op's ONNX node has no kernel to report.
"""

from __future__ import annotations

import numpy as np
import tvm
from tvm import relax
from tvm.relax.expr_functor import PyExprMutator, mutator

from .relax_helpers import mutate_functions, same_type

# Ops that only re-view their input's elements in row-major order: a chain of them that gets back
# to an earlier shape returns that tensor (reshape to the same shape, expand_dims then squeeze).
_VIEWS = ("relax.reshape", "relax.squeeze", "relax.expand_dims", "relax.flatten")
# Ops that return their input when the output has the input's shape and dtype.
_SAME_TYPE = ("relax.broadcast_to", "relax.astype")
# Elementwise ops with an identity: op -> (identity, the argument positions it may take).
_IDENTITIES = {
    "relax.add": (0, (0, 1)),  # x + 0, 0 + x
    "relax.subtract": (0, (1,)),  # x - 0
    "relax.multiply": (1, (0, 1)),  # x * 1, 1 * x
    "relax.divide": (1, (1,)),  # x / 1
}


def RemoveNoOps() -> tvm.transform.Pass:
    """Same-shape reshapes and broadcasts, same-dtype casts, `x * 1`, `x + 0` -> their input."""
    return tvm.transform.module_pass(_remove_noops, opt_level=0, name="tvm_fuse.RemoveNoOps")


def _remove_noops(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
    remover = _Remover(mod)
    return mutate_functions(mod, remover, remover.remove)


def _source(var: relax.Var, value, values: dict) -> relax.Var | None:
    """The variable that the binding `var = value` equals, if `value` is a no-op on it."""
    if isinstance(value, relax.TupleGetItem) and value.index == 0:  # dropout's output, at inference
        dropout = values.get(value.tuple_value) if isinstance(value.tuple_value, relax.Var) else None
        if isinstance(dropout, relax.Call) and dropout.op.same_as(tvm.ir.Op.get("relax.nn.dropout")):
            source = dropout.args[0]
            return source if isinstance(source, relax.Var) else None
    if not isinstance(value, relax.Call) or not isinstance(value.op, tvm.ir.Op):
        return None
    op = value.op.name
    if op in _VIEWS:
        source = value.args[0]
        while not same_type(source, var):
            view = values.get(source) if isinstance(source, relax.Var) else None
            if not (isinstance(view, relax.Call) and isinstance(view.op, tvm.ir.Op) and view.op.name in _VIEWS):
                return None
            source = view.args[0]
        return source if isinstance(source, relax.Var) else None
    if op in _SAME_TYPE:
        source = value.args[0]
        return source if isinstance(source, relax.Var) and same_type(source, var) else None
    if op in _IDENTITIES:
        identity, positions = _IDENTITIES[op]
        for position in positions:
            constant, source = value.args[position], value.args[1 - position]
            if (
                isinstance(constant, tvm.ir.GenericConst)
                and np.all(constant.value.numpy() == identity)
                and isinstance(source, relax.Var)
                and same_type(source, var)
            ):
                return source
    return None


@mutator
class _Remover(PyExprMutator):
    """Maps each no-op's variable to its input: dataflow variables are replaced where they are
    read, other variables (the block's outputs) are bound to the input."""

    def __init__(self, mod: tvm.IRModule):
        super().__init__(mod)
        self._values: dict = {}

    def remove(self, func: relax.Function) -> relax.Function:
        self._values = dict(relax.analysis.get_var2val(func).items())
        if all(_source(var, value, self._values) is None for var, value in self._values.items()):
            return func
        return relax.analysis.remove_all_unused(self.visit_expr(func))

    def visit_var_binding_(self, binding: relax.VarBinding) -> None:
        source = _source(binding.var, binding.value, self._values)
        if source is None:
            return super().visit_var_binding_(binding)
        source = self.visit_expr(source)
        if isinstance(binding.var, relax.DataflowVar):
            self.set_var_remap(binding.var, source)
        else:
            self.builder_.emit_normalized(relax.VarBinding(binding.var, source))
