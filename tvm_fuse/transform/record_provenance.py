"""Copy each binding's ONNX node (its variable name, see `provenance`) into the span of the call
it binds. `FuseOpsByPattern` renames the variables it moves into a composite function (the
result becomes `gv`) but keeps the calls, so spans carry the node through fusion."""

from __future__ import annotations

import tvm
from tvm import relax
from tvm.relax.expr_functor import PyExprMutator, mutator

from .. import provenance
from .relax_helpers import mutate_functions


@mutator
class _SpanWriter(PyExprMutator):
    def visit_var_binding_(self, binding: relax.VarBinding) -> None:
        value = self.visit_expr(binding.value)
        index = provenance.node_index(binding.var)
        if isinstance(value, relax.Call) and index is not None:
            value = self.builder_.normalize(  # a rewrite's nodes too
                provenance.recorded(value, {index, *provenance.span_nodes(value)}))
        self.builder_.emit_normalized(relax.VarBinding(binding.var, value))


def RecordProvenance() -> tvm.transform.Pass:
    @tvm.transform.module_pass(opt_level=0, name="tvm_fuse.RecordProvenance")
    def record(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        writer = _SpanWriter(mod)
        return mutate_functions(mod, writer, writer.visit_expr)

    return record
