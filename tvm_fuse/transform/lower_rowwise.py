"""Give layer norms and softmaxes over the last axis our vectorized kernels
(`compute.rowwise`) instead of TVM's, which reduce one element at a time: fp32, of a width the
vector width divides (a layer norm with a scale and an offset). Any other stays TVM's."""

from __future__ import annotations

import tvm
from tvm import relax

from ..compute.rowwise import layer_norm_rows, softmax_rows
from .lower_matmuls import KERNEL_ATTR
from .rebind import mutate_functions


@relax.expr_functor.mutator
class _RowwiseLowerer(relax.PyExprMutator):
    def __init__(self, mod: tvm.IRModule, lanes: int):
        super().__init__(mod)
        self.lanes = lanes

    def visit_var_binding_(self, binding: relax.VarBinding) -> None:
        call = binding.value
        op = call.op.name if isinstance(call, relax.Call) and isinstance(call.op, tvm.ir.Op) else None
        if op == "relax.nn.layer_norm" and _layer_norm_lowerable(call, self.lanes):
            kernel = self.builder_.call_te(layer_norm_rows, *call.args, float(call.attrs.epsilon), self.lanes,
                                           primfunc_name_hint="layer_norm",
                                           primfunc_attrs={KERNEL_ATTR: "nn.layer_norm", "op_pattern": 8})
        elif op == "relax.nn.softmax" and _rows_lowerable(call.args[0], [int(call.attrs.axis)], self.lanes):
            kernel = self.builder_.call_te(softmax_rows, call.args[0], self.lanes, primfunc_name_hint="softmax",
                                           primfunc_attrs={KERNEL_ATTR: "nn.softmax", "op_pattern": 8})
        else:
            return super().visit_var_binding_(binding)
        self.builder_.emit_normalized(relax.VarBinding(binding.var, self.builder_.normalize(kernel)))


def _rows_lowerable(data: relax.Expr, axes, lanes: int) -> bool:
    """fp32 `data` reduced over its last axis, of a static width `lanes` divides."""
    if not isinstance(data.ty, relax.TensorType) or data.ty.shape is None or str(data.ty.dtype) != "float32":
        return False
    rank, width = data.ty.ndim, data.ty.shape[-1]
    return [a % rank for a in axes] == [rank - 1] and isinstance(width, tvm.tirx.IntImm) and int(width) % lanes == 0


def _layer_norm_lowerable(call: relax.Call, lanes: int) -> bool:
    data, gamma, beta = call.args
    return (_rows_lowerable(data, [int(a) for a in call.attrs.axes], lanes) and call.attrs.center and call.attrs.scale
            and all(a.ty.ndim == 1 and str(a.ty.dtype) == "float32" for a in (gamma, beta)))


def LowerRowwise(lanes: int) -> tvm.transform.Pass:
    """`lanes`: the vector width in fp32 lanes, the width of each row's partial reductions."""

    @tvm.transform.module_pass(opt_level=0, name="tvm_fuse.LowerRowwise")
    def lower(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        lowerer = _RowwiseLowerer(mod, lanes)
        return mutate_functions(mod, lowerer, lowerer.visit_expr)

    return lower
