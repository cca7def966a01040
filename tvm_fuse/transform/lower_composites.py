"""Replace each composite function of the fusion table by ONE kernel: a call to a TIR function
built from our tensor-expression computes (`tvm_fuse.compute`), the anchor followed by its
post-ops as elementwise stages that the schedule inlines into the anchor's output loop.

Constant weights are rearranged here, once, at build time: dense weights packed in blocks of
output columns, and the weights of 3x3 stride-1 blocked convs with outputs large enough to
pay transformed for Winograd (`TVM_FUSE_DISABLE_WINOGRAD=1` keeps the direct conv).

The kernel is marked opaque so TVM's generic `FuseOps` never merges more ops into it: what is
fused is exactly what the table matched. The kernel's attributes record its pattern, and the span of
each call the ONNX nodes it covers, for the fusion report.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import tvm
from tvm import relax, te
from tvm.ir.expr import GenericConst

from .. import provenance
from ..compute import epilogue
from ..compute.conv import convolution, is_depthwise
from ..compute.conv_nchwc import conv2d_nchwc, depthwise_conv2d_nchwc
from ..compute.matmul import dense_packed, matmul, pack_dense_weight
from ..compute.requantize import holds_integers
from ..compute.winograd_nchwc import (
    KERNEL,
    MIN_INPUT_CHANNELS,
    TILE_BY_OUTPUT_SIDE,
    choose_tile,
    conv2d_winograd_nchwc,
    transform_weight,
)
from ..ir_names import ANCHOR_ATTR, OP_PATTERN_ATTR, OPAQUE, PATTERN_ATTR
from ..patterns.table import composite_nodes, composite_of
from .relax_helpers import mutate_functions


@dataclass(frozen=True)
class _Weight:
    """The anchor's weight as rearranged at build time: its parameter position, the new
    constant, and for a conv the Winograd tile it was transformed for (a dense weight is
    packed by `pack_dense_weight`)."""

    position: int
    value: relax.Constant
    winograd_tile: int | None = None


def anchor_compute(call: relax.Call, data: te.Tensor, weight: te.Tensor, rearranged: _Weight | None = None) -> te.Tensor:
    """The anchor op `call` of a composite on te tensors (its weight as `rearranged`, if it was)."""
    if call.op.name == "relax.matmul":
        return dense_packed(data, weight, int(call.ty.shape[-1])) if rearranged else matmul(data, weight)
    attrs = call.attrs
    geometry = ([int(s) for s in attrs.strides], [int(p) for p in attrs.padding], [int(d) for d in attrs.dilation])
    if str(attrs.data_layout) in ("NCW", "NCHW"):
        return convolution(data, weight, *geometry, int(attrs.groups))
    if rearranged:
        return conv2d_winograd_nchwc(data, weight, geometry[1], rearranged.winograd_tile)
    if is_depthwise(attrs.groups, weight.shape):
        return depthwise_conv2d_nchwc(data, weight, *geometry)
    return conv2d_nchwc(data, weight, *geometry, int(attrs.groups))  # NCHW{c}c, see transform.blocked_layout


def composite_compute(body: relax.SeqExpr, params: list[relax.Var], anchor, inputs=None):
    """A `call_te` function computing a composite's body on te tensors, binding by binding:
    `anchor(call, *operands)` computes its first binding, `epilogue` the others.
    `inputs(param, tensor)`, if given, may replace a parameter's tensor (e.g. dequantize it);
    a composite's symbolic dims that its tensors' shapes do not give (its `tir_vars`) come as a
    list, left as they are."""
    (block,) = body.blocks

    def compute(*tensors):
        values = {p: inputs(p, t) if inputs and isinstance(t, te.Tensor) else t for p, t in zip(params, tensors)}

        def operand(arg):
            return values[arg] if isinstance(arg, relax.Var) else arg  # PrimValue bounds of clip

        for index, binding in enumerate(block.bindings):
            call = binding.value
            args = [operand(a) for a in call.args]
            values[binding.var] = anchor(call, *args) if index == 0 else epilogue.apply(call.op.name, args, call.attrs)
        return values[body.body]

    return compute


def _rearranged_weight(func: relax.Function, args, block: int, winograd: bool) -> _Weight | None:
    """The anchor's constant weight rearranged for its kernel, or None to keep it as it is."""
    anchor = func.body.blocks[0].bindings[0].value
    position = next(i for i, p in enumerate(func.params) if p.same_as(anchor.args[1]))
    weight = args[position]
    if not isinstance(weight, GenericConst):
        return None
    if anchor.op.name == "relax.matmul":
        if weight.ty.ndim != 2:
            return None
        return _Weight(position, relax.const(pack_dense_weight(weight.value.numpy(), block)))
    # Integer weights (ConvInteger's, `frontend.dynamic_quantization`) make an exact product in
    # the direct conv; Winograd's transforms round it, and its int32 result came out 1 apart.
    tile = winograd_tile(anchor) if winograd and not holds_integers(weight.value.numpy()) else None
    if tile is None:
        return None
    return _Weight(position, relax.const(transform_weight(weight.value.numpy(), tile)), winograd_tile=tile)


def winograd_tile(conv: relax.Call, table=TILE_BY_OUTPUT_SIDE) -> int | None:
    """The Winograd tile for a blocked, dense, stride-1 undilated 3x3 conv of at least
    `MIN_INPUT_CHANNELS` input channels (`choose_tile` in `table`)."""
    attrs = conv.attrs
    data, weight = (None if arg.ty.shape is None else list(arg.ty.shape) for arg in conv.args)
    if (str(attrs.data_layout) in ("NCW", "NCHW") or int(attrs.groups) != 1 or weight is None
            or [int(d) for d in weight[2:4]] != [KERNEL, KERNEL]
            or any(int(s) != 1 for s in attrs.strides) or any(int(d) != 1 for d in attrs.dilation)):
        return None
    if len(data) == 5 and int(data[1]) * int(data[4]) < MIN_INPUT_CHANNELS:
        # Also, one channel's one-lane transforms took LLVM minutes to compile (the CRNN stem
        # at batch 2: 350 s).
        return None
    if not all(isinstance(side, tvm.tirx.IntImm) for side in data[2:4]):
        return None  # its tile is chosen by the output's size: the direct conv serves every size
    top, left, bottom, right = (int(p) for p in attrs.padding)
    return choose_tile(int(data[2]) + top + bottom - KERNEL + 1, int(data[3]) + left + right - KERNEL + 1, table)


@relax.expr_functor.mutator
class _Lowerer(relax.PyExprMutator):
    def __init__(self, mod: tvm.IRModule, block: int, winograd: bool):
        super().__init__(mod)
        self.mod = mod
        self.block = block
        self.winograd = winograd

    def visit_call_(self, call: relax.Call) -> relax.Expr:
        call = super().visit_call_(call)
        func = composite_of(self.mod, call)
        if func is None:
            return call
        args = list(call.args)
        rearranged = _rearranged_weight(func, args, self.block, self.winograd)
        if rearranged is not None:
            args[rearranged.position] = rearranged.value
        winograd = f"winograd{rearranged.winograd_tile}_" if rearranged and rearranged.winograd_tile else ""
        compute = composite_compute(func.body, list(func.params),
                                    lambda call, data, weight: anchor_compute(call, data, weight, rearranged))
        return self.builder_.normalize(kernel_call(self.builder_, func, compute, args, winograd))


def kernel_call(builder: relax.BlockBuilder, func: relax.Function, compute, args, prefix: str = "",
                attrs: dict | None = None, nodes=()) -> relax.Call:
    """A call of the kernel `compute` builds for the composite `func` on `args`, named after
    its pattern (after `prefix`), with the pattern's attributes (and `attrs`) on the kernel
    and the composite's ONNX nodes (and `nodes`, others it computes too) on the call."""
    pattern = str(func.attrs[PATTERN_ATTR])
    kernel = builder.call_te(
        compute, *args,
        primfunc_name_hint=prefix + pattern.replace("+", "_"),
        primfunc_attrs={PATTERN_ATTR: pattern, ANCHOR_ATTR: func.attrs[ANCHOR_ATTR], OP_PATTERN_ATTR: OPAQUE,
                        **(attrs or {})},
    )
    # Kernels of equal shape share one function; each call site records its own nodes.
    return provenance.recorded(kernel, [*nodes, *composite_nodes(func)])


WINOGRAD_SWITCH = "TVM_FUSE_DISABLE_WINOGRAD"


def winograd_enabled() -> bool:
    return os.environ.get(WINOGRAD_SWITCH, "").strip().lower() in ("", "0", "false", "no", "off")


def LowerComposites(block: int) -> tvm.transform.Pass:
    """`block`: the vector width in fp32 lanes, by which dense weights are packed."""
    winograd = winograd_enabled()

    @tvm.transform.module_pass(opt_level=0, name="tvm_fuse.LowerComposites")
    def lower(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        lowerer = _Lowerer(mod, block, winograd)
        lowered = mutate_functions(
            mod, lowerer, lambda func: None if PATTERN_ATTR in (func.attrs or {}) else lowerer.visit_expr(func))
        # The composites are now dead.
        return relax.transform.DeadCodeElimination()(lowered)

    return lower
