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
from tvm.ir.expr import GenericConst

from .. import provenance
from ..compute import epilogue
from ..compute.conv import convolution
from ..compute.conv_nchwc import conv2d_nchwc, depthwise_conv2d_nchwc
from ..compute.matmul import dense_packed, matmul, pack_dense_weight
from ..patterns.table import ANCHOR_ATTR, NODES_ATTR, PATTERN_ATTR
from .rebind import mutate_functions

_OPAQUE = 8  # relax OpPatternKind kOpaque


def _anchor(call: relax.Call, data: te.Tensor, weight: te.Tensor, packed: bool) -> te.Tensor:
    if call.op.name == "relax.matmul":
        return dense_packed(data, weight) if packed else matmul(data, weight)
    attrs = call.attrs
    geometry = ([int(s) for s in attrs.strides], [int(p) for p in attrs.padding], [int(d) for d in attrs.dilation])
    if str(attrs.data_layout) in ("NCW", "NCHW"):
        return convolution(data, weight, *geometry, int(attrs.groups))
    if int(attrs.groups) == 1:  # NCHW{c}c, see transform.blocked_layout
        return conv2d_nchwc(data, weight, *geometry)
    return depthwise_conv2d_nchwc(data, weight, *geometry)


def _kernel_compute(body: relax.SeqExpr, params: list[relax.Var], packed: bool):
    """A `call_te` function computing the composite's body on te tensors, binding by binding;
    `packed`: the anchor's weight comes packed (`pack_dense_weight`)."""
    (block,) = body.blocks

    def compute(*tensors):
        values = dict(zip(params, tensors))

        def operand(arg):
            return values[arg] if isinstance(arg, relax.Var) else arg  # PrimValue bounds of clip

        for index, binding in enumerate(block.bindings):
            call = binding.value
            args = [operand(a) for a in call.args]
            values[binding.var] = (_anchor(call, *args, packed) if index == 0
                                   else epilogue.apply(call.op.name, args, call.attrs))
        return values[body.body]

    return compute


def _packed_weight(func: relax.Function, args, block: int):
    """(position, packed constant) when the anchor is a dense layer whose N the block divides."""
    anchor = func.body.blocks[0].bindings[0].value
    if anchor.op.name != "relax.matmul":
        return None
    position = next(i for i, p in enumerate(func.params) if p.same_as(anchor.args[1]))
    weight = args[position]
    if not isinstance(weight, GenericConst) or weight.ty.ndim != 2 or int(weight.ty.shape[1]) % block:
        return None
    return position, relax.const(pack_dense_weight(weight.value.numpy(), block))


@relax.expr_functor.mutator
class _Lowerer(relax.PyExprMutator):
    def __init__(self, mod: tvm.IRModule, block: int):
        super().__init__(mod)
        self.mod = mod
        self.block = block

    def visit_call_(self, call: relax.Call) -> relax.Expr:
        call = super().visit_call_(call)
        if not isinstance(call.op, relax.GlobalVar):
            return call
        func = self.mod[call.op]
        if not isinstance(func, relax.Function) or PATTERN_ATTR not in (func.attrs or {}):
            return call
        pattern = str(func.attrs[PATTERN_ATTR])
        args = list(call.args)
        packed = _packed_weight(func, args, self.block)
        if packed is not None:  # packed once here, at build time
            args[packed[0]] = packed[1]
        kernel = self.builder_.call_te(
            _kernel_compute(func.body, list(func.params), packed is not None),
            *args,
            primfunc_name_hint=pattern.replace("+", "_"),
            primfunc_attrs={PATTERN_ATTR: pattern, ANCHOR_ATTR: func.attrs[ANCHOR_ATTR], "op_pattern": _OPAQUE},
        )
        # Kernels of equal shape share one function; each call site records its own nodes.
        nodes = [int(i) for i in str(func.attrs[NODES_ATTR]).split(",") if i]
        located = relax.Call(kernel.op, kernel.args, kernel.attrs, kernel.ty_args, provenance.span(nodes))
        return self.builder_.normalize(located)


def LowerComposites(block: int) -> tvm.transform.Pass:
    """`block`: the vector width in fp32 lanes, by which dense weights are packed."""
    @tvm.transform.module_pass(opt_level=0, name="tvm_fuse.LowerComposites")
    def lower(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        lowerer = _Lowerer(mod, block)
        lowered = mutate_functions(
            mod, lowerer, lambda func: None if PATTERN_ATTR in (func.attrs or {}) else lowerer.visit_expr(func))
        # The composites are now dead.
        return relax.transform.DeadCodeElimination()(lowered)

    return lower
