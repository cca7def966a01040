"""Give layer norms over the last axis our vectorized kernel (`compute.layer_norm`) instead of
TVM's, which reduces one element at a time: a norm of width the vector width divides, fp32,
with a scale and an offset. Any other stays TVM's."""

from __future__ import annotations

import tvm
from tvm import relax

from ..compute.layer_norm import layer_norm_rows
from .lower_matmuls import KERNEL_ATTR
from .rebind import mutate_functions


@relax.expr_functor.mutator
class _LayerNormLowerer(relax.PyExprMutator):
    def __init__(self, mod: tvm.IRModule, lanes: int):
        super().__init__(mod)
        self.lanes = lanes

    def visit_var_binding_(self, binding: relax.VarBinding) -> None:
        value = binding.value
        if not (isinstance(value, relax.Call) and value.op.same_as(tvm.ir.Op.get("relax.nn.layer_norm"))
                and _lowerable(value, self.lanes)):
            return super().visit_var_binding_(binding)
        kernel = self.builder_.call_te(layer_norm_rows, *value.args, float(value.attrs.epsilon), self.lanes,
                                       primfunc_name_hint="layer_norm",
                                       primfunc_attrs={KERNEL_ATTR: "nn.layer_norm", "op_pattern": 8})
        self.builder_.emit_normalized(relax.VarBinding(binding.var, self.builder_.normalize(kernel)))


def _lowerable(call: relax.Call, lanes: int) -> bool:
    data, gamma, beta = call.args
    attrs = call.attrs
    if data.ty.shape is None or not all(str(a.ty.dtype) == "float32" for a in call.args) \
            or not (attrs.center and attrs.scale):
        return False
    rank, width = data.ty.ndim, data.ty.shape[-1]
    return ([int(a) % rank for a in attrs.axes] == [rank - 1] and isinstance(width, tvm.tirx.IntImm)
            and int(width) % lanes == 0 and all(a.ty.ndim == 1 for a in (gamma, beta)))


def LowerLayerNorms(lanes: int) -> tvm.transform.Pass:
    """`lanes`: the vector width in fp32 lanes, the width of each row's partial sums."""

    @tvm.transform.module_pass(opt_level=0, name="tvm_fuse.LowerLayerNorms")
    def lower(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        lowerer = _LayerNormLowerer(mod, lanes)
        return mutate_functions(mod, lowerer, lowerer.visit_expr)

    return lower
