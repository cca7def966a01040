"""Run conv and dense kernels in bf16 (`build(precision="bf16")`).

Each composite whose anchor is a blocked (NCHW{c}c) conv or a dense layer with constant weights
becomes ONE bf16 kernel: its weights rounded to bf16 and packed in pairs along the reduction
here, at build time (`compute.bf16`), its fp32 input rounded to bf16 as the kernel reads it (a
conv's as it pads it), the products summed in fp32, and the composite's post-ops applied in
fp32 to the accumulators. Outputs stay fp32, so everything that reads them is unchanged.

Left in fp32: products of two activations (attention's), dense layers whose columns the vector
width does not divide or whose reduction is odd, depthwise convs (bound by memory, not arithmetic: halving their products gains
nothing), convs whose input block is odd (an RGB image's 3 channels: the stem), and the 3x3 convs
Winograd takes (its 4x fewer products than a direct conv outweigh bf16's 2x rate).
"""

from __future__ import annotations

import warnings

import tvm
from tvm import relax
from tvm.ir.expr import GenericConst
from tvm.relax.expr_functor import PyExprMutator, mutator

from ..compute.bf16 import PAIR, pack_dense_pairs, pack_pairs
from ..compute.conv_nchwc_bf16 import BF16_OUT_BLOCKS, conv2d_nchwc_bf16
from ..compute.dense_bf16 import dense_packed_bf16
from ..compute.matmul import pack_dense_weight
from ..errors import InputError
from ..patterns.table import PATTERN_ATTR
from ..target import isa_features, target_string
from .apply_schedules import vector_lanes
from .lower_composites import called_composite, composite_compute, kernel_call, winograd_enabled, winograd_tile
from .rebind import mutate_functions

BF16_ATTR = "tvm_fuse.bf16"  # kernel attribute: its products run in bf16


def RealizeBf16(lanes: int = 16, native: bool = True) -> tvm.transform.Pass:
    """`lanes`: the target's fp32 vector width, the block dense weights are packed in.
    `native`: tensorize with `vdpbf16ps` (the target has AVX512-BF16), else its portable form."""

    @tvm.transform.module_pass(opt_level=0, name="tvm_fuse.RealizeBf16")
    def realize(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        realizer = _Realizer(mod, lanes, native)
        updated = mutate_functions(
            mod, realizer, lambda f: None if PATTERN_ATTR in (f.attrs or {}) else realizer.visit_expr(f))
        return relax.transform.DeadCodeElimination()(updated)

    return realize


def bf16_anchor(func: relax.Function, args, lanes: int, native: bool):
    """(the weight's parameter position, its bf16 packing, the anchor's bf16 compute) if
    composite `func`, called on `args`, runs as a bf16 kernel; else None."""
    anchor = func.body.blocks[0].bindings[0].value
    position = next((i for i, p in enumerate(func.params) if p.same_as(anchor.args[1])), None)
    weight = args[position] if position is not None else None
    if not isinstance(weight, GenericConst):
        return None
    if anchor.op.name == "relax.matmul":
        k, n = (int(d) for d in weight.ty.shape) if weight.ty.ndim == 2 else (1, 1)
        if weight.ty.ndim != 2 or k % PAIR or n % lanes:
            return None
        packed = pack_dense_pairs(pack_dense_weight(weight.value.numpy(), lanes))
        return position, packed, lambda _call, data, packed_weight: dense_packed_bf16(data, packed_weight, native)
    if anchor.op.name != "relax.nn.conv2d" or weight.ty.ndim != 6:
        return None
    attrs = anchor.attrs
    in_block, out_block = (int(weight.ty.shape[axis]) for axis in (4, 5))
    if int(attrs.groups) != 1 or in_block % PAIR or out_block not in BF16_OUT_BLOCKS:
        return None
    if winograd_enabled() and winograd_tile(anchor) is not None:
        return None
    geometry = [[int(v) for v in values] for values in (attrs.strides, attrs.padding, attrs.dilation)]
    return position, pack_pairs(weight.value.numpy()), \
        lambda _call, data, packed_weight: conv2d_nchwc_bf16(data, packed_weight, *geometry, native)


@mutator
class _Realizer(PyExprMutator):
    def __init__(self, mod: tvm.IRModule, lanes: int, native: bool):
        super().__init__(mod)
        self.mod = mod
        self.lanes = lanes
        self.native = native

    def visit_call_(self, call: relax.Call) -> relax.Expr:
        call = super().visit_call_(call)
        func = called_composite(self.mod, call)
        args = list(call.args)
        found = bf16_anchor(func, args, self.lanes, self.native) if func is not None else None
        if found is None:
            return call
        position, packed, anchor = found
        args[position] = relax.const(packed)
        compute = composite_compute(func.body, list(func.params), anchor)
        return self.builder_.normalize(kernel_call(self.builder_, func, compute, args, "bf16_", {BF16_ATTR: True}))


PRECISIONS = ("fp32", "bf16")


def bf16_pass(precision: str, target: tvm.target.Target) -> tvm.transform.Pass | None:
    """`RealizeBf16` for a bf16 build on a target with AVX512-BF16; None for fp32, and (with a
    warning) for a target without it, which builds in fp32."""
    if precision not in PRECISIONS:
        raise InputError(f"precision must be one of {', '.join(PRECISIONS)}, not {precision!r}")
    if precision == "fp32":
        return None
    if "avx512_bf16" not in isa_features(target):
        warnings.warn(f"bf16 kernels need AVX512-BF16; {target_string(target)} builds in fp32")
        return None
    return RealizeBf16(vector_lanes(target))
