"""Replace each composite function of the fusion table by ONE kernel: a call to a TIR function
built from our tensor-expression computes (`tvm_fuse.compute`), the anchor followed by its
post-ops as elementwise stages that the schedule inlines into the anchor's output loop.

The kernel is marked opaque so TVM's generic `FuseOps` never merges more ops into it: what is
fused is exactly what the table matched. The kernel's attributes record its pattern, and the span of
each call the ONNX nodes it covers, for the fusion report.
"""

from __future__ import annotations

import tvm
from tvm import relax, te

from .. import provenance
from ..compute import epilogue
from ..compute.conv import convolution
from ..compute.conv_nchwc import conv2d_nchwc, depthwise_conv2d_nchwc
from ..compute.matmul import matmul
from ..patterns.table import ANCHOR_ATTR, NODES_ATTR, PATTERN_ATTR

_OPAQUE = 8  # relax OpPatternKind kOpaque


def _anchor(call: relax.Call, data: te.Tensor, weight: te.Tensor) -> te.Tensor:
    if call.op.name == "relax.matmul":
        return matmul(data, weight)
    attrs = call.attrs
    geometry = ([int(s) for s in attrs.strides], [int(p) for p in attrs.padding], [int(d) for d in attrs.dilation])
    if str(attrs.data_layout) in ("NCW", "NCHW"):
        return convolution(data, weight, *geometry, int(attrs.groups))
    if int(attrs.groups) == 1:  # NCHW{c}c, see transform.blocked_layout
        return conv2d_nchwc(data, weight, *geometry)
    return depthwise_conv2d_nchwc(data, weight, *geometry)


def _kernel_compute(body: relax.SeqExpr, params: list[relax.Var]):
    """A `call_te` function computing the composite's body on te tensors, binding by binding."""
    (block,) = body.blocks

    def compute(*tensors):
        values = dict(zip(params, tensors))

        def operand(arg):
            return values[arg] if isinstance(arg, relax.Var) else arg  # PrimValue bounds of clip

        for index, binding in enumerate(block.bindings):
            call = binding.value
            args = [operand(a) for a in call.args]
            values[binding.var] = _anchor(call, *args) if index == 0 else epilogue.apply(call.op.name, args, call.attrs)
        return values[body.body]

    return compute


@relax.expr_functor.mutator
class _Lowerer(relax.PyExprMutator):
    def __init__(self, mod: tvm.IRModule):
        super().__init__(mod)
        self.mod = mod

    def visit_call_(self, call: relax.Call) -> relax.Expr:
        call = super().visit_call_(call)
        if not isinstance(call.op, relax.GlobalVar):
            return call
        func = self.mod[call.op]
        if not isinstance(func, relax.Function) or PATTERN_ATTR not in (func.attrs or {}):
            return call
        pattern = str(func.attrs[PATTERN_ATTR])
        kernel = self.builder_.call_te(
            _kernel_compute(func.body, list(func.params)),
            *call.args,
            primfunc_name_hint=pattern.replace("+", "_"),
            primfunc_attrs={PATTERN_ATTR: pattern, ANCHOR_ATTR: func.attrs[ANCHOR_ATTR], "op_pattern": _OPAQUE},
        )
        # Kernels of equal shape share one function; each call site records its own nodes.
        nodes = [int(i) for i in str(func.attrs[NODES_ATTR]).split(",") if i]
        located = relax.Call(kernel.op, kernel.args, kernel.attrs, kernel.ty_args, provenance.span(nodes))
        return self.builder_.normalize(located)


def LowerComposites() -> tvm.transform.Pass:
    @tvm.transform.module_pass(opt_level=0, name="tvm_fuse.LowerComposites")
    def lower(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        lowerer = _Lowerer(mod)
        for gvar, func in mod.functions_items():
            if isinstance(func, relax.Function) and PATTERN_ATTR not in (func.attrs or {}):
                lowerer.builder_.update_func(gvar, lowerer.visit_expr(func))
        lowered = lowerer.builder_.get()
        # The composites are now dead.
        return relax.transform.DeadCodeElimination()(lowered)

    return lower
