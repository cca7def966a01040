"""Run a dynamically quantized model's integer products on int8 kernels.

ONNX Runtime's `quantize_dynamic` writes a MatMul as DynamicQuantizeLinear (u8 codes of the
input on its own range), MatMulInteger with s8 weight codes, a Cast and a Mul by the two
scales. The importer computes the product as float32 products of the same integers
(`frontend.dynamic_quantization`): exact, but at fp32 speed. Here such a dense composite, whose
data is u8 codes less their zero point and whose weight holds integers of 8 bits, becomes an
int8 kernel (`compute.dense_int8`): the codes times the packed s8 weights summed in s32, less
the zero point times each column's weight sum, as ONNX Runtime sums them, then the composite's
own post-ops. Only where the target multiplies u8 by s8 without saturating (VNNI, AMX, or
weights of 7 bits); elsewhere the product stays fp32. A DynamicQuantizeLSTM's sequence kernel
whose R is s8 codes steps on `vpdpbusd` where the target has VNNI
(`compute.recurrent.lstm_vnni_sequence`).
"""

from __future__ import annotations

import numpy as np
import tvm
from tvm import relax
from tvm.ir.expr import GenericConst
from tvm.relax.expr_functor import PyExprMutator, mutator

from ...amx import fits_amx
from ...compute.conv_nchwc_int8 import INT8_OUT_BLOCKS
from ...compute.dense_int8 import QUAD, dense_int8, integer_product, pack_dense_quads
from ...compute.matmul import packing_block
from ...compute.recurrent import lstm_vnni_sequence, pack_recurrent_quads
from ...compute.requantize import holds_integers
from ...ir_names import KERNEL_ATTR, REVERSE_ATTR
from ...patterns.table import composite_of
from ...quantization.weights import S7_MAX, S8_MAX
from ...target import isa_features, vector_lanes
from ..lower_composites import composite_compute, kernel_call
from ..relax_helpers import is_op, mutate_functions, rebind
from .composite import anchor_of
from .int8 import INT8_ATTR

_DENSE = "relax.matmul"


def RealizeIntegerProducts(vnni: bool, lanes: int, amx: bool = False) -> tvm.transform.Pass:
    """`vnni`: the target has `vpdpbusd` (without it, only weights of 7 bits run in int8: the
    fallback's u8 x s8 pairs sum in int16). `lanes`: its fp32 vector width. `amx`: it has
    AMX-INT8, whose tiles take the products that fit them."""

    @tvm.transform.module_pass(opt_level=0, name="tvm_fuse.RealizeIntegerProducts")
    def realize(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        values = {b.var: b.value for block in mod["main"].body.blocks for b in block.bindings}
        limit = (S8_MAX if vnni or amx else S7_MAX) + 1
        products = {var: found for var, value in values.items()
                    if (found := _integer_product(mod, values, value, limit)) is not None}
        recurrences = {var for var, value in values.items() if vnni and _s8_recurrence(mod, value)}
        if not products and not recurrences:
            return mod
        realizer = _Realizer(mod, products, recurrences, vnni, lanes, amx)
        main = mod.get_global_var("main")
        updated = mutate_functions(mod, realizer, lambda f: realizer.visit_expr(f) if f.same_as(mod[main]) else None)
        return relax.transform.DeadCodeElimination()(updated)

    return realize


def realize_integer_products(target: tvm.target.Target) -> tvm.transform.Pass:
    """The `RealizeIntegerProducts` pass for `target`'s features."""
    features = isa_features(target)
    return RealizeIntegerProducts("avx512_vnni" in features, vector_lanes(target), "amx" in features)


def _integer_product(mod, values, value, limit: int):
    """(u8 codes, zero point or None, s8 weight codes [K, N]) if `value` calls a dense composite
    of u8 codes less a scalar zero point (both as float32) and integer weights in [-limit,
    limit), K whole quads and N whole blocks of the kernel's columns; else None."""
    func = composite_of(mod, value)
    if func is None:
        return None
    found = anchor_of(func)
    if found.op != _DENSE or found.data is None or found.weight is None:
        return None
    weight = value.args[found.weight]
    if not isinstance(weight, GenericConst) or weight.ty.ndim != 2:
        return None
    weight = weight.value.numpy()
    whole = weight.shape[0] % QUAD == 0 and weight.shape[1] % min(INT8_OUT_BLOCKS) == 0
    if not (whole and np.all(weight >= -limit) and np.all(weight < limit) and holds_integers(weight)):
        return None
    codes, zero_point = _codes_less_zero_point(values, value.args[found.data])
    if codes is None:
        return None
    return codes, zero_point, weight.astype(np.int8)


def _codes_less_zero_point(values, data):
    """(u8 codes, float32 scalar zero point or None) whose difference `data` is bound to:
    `astype(codes, float32) - zero_point` or `astype(codes, float32)`; (None, None) otherwise."""
    zero_point = None
    value = values.get(data)
    if is_op(value, "relax.subtract") and value.args[1].ty.ndim == 0 and str(value.args[1].ty.dtype) == "float32":
        data, zero_point = value.args
        value = values.get(data)
    if not is_op(value, "relax.astype") or str(value.args[0].ty.dtype) != "uint8":
        return None, None
    return value.args[0], zero_point


def _s8_recurrence(mod: tvm.IRModule, value) -> bool:
    """Whether `value` calls a dynamically quantized LSTM's sequence kernel whose R is s8 codes
    (about a zero point of 0) of a hidden size of whole quads: `compute.recurrent`'s
    `lstm_vnni_sequence` takes it."""
    if not is_op(value, "relax.call_tir"):
        return False
    func = mod[value.args[0]]
    args = value.args[1].fields
    if str((func.attrs or {}).get(KERNEL_ATTR, "")) != "lstm" or len(args) != 5:
        return False
    recurrent = args[1]
    return (isinstance(recurrent, GenericConst) and str(recurrent.ty.dtype) == "int8"
            and int(recurrent.ty.shape[2]) % QUAD == 0)


@mutator
class _Realizer(PyExprMutator):
    def __init__(self, mod: tvm.IRModule, products: dict, recurrences: set, vnni: bool, lanes: int, amx: bool):
        super().__init__(mod)
        self.mod = mod
        self.products = products
        self.recurrences = recurrences
        self.vnni = vnni
        self.lanes = lanes
        self.amx = amx

    def visit_var_binding_(self, binding: relax.VarBinding) -> None:
        if binding.var in self.recurrences:
            return self._vnni_recurrence(binding)
        found = self.products.get(binding.var)
        if found is None:
            return super().visit_var_binding_(binding)
        codes, zero_point, weight = found
        call = binding.value
        func = self.mod[call.op]
        params = list(func.params)
        anchor = anchor_of(func)
        block = packing_block(weight.shape[1], self.lanes)
        tiles = self.amx and fits_amx(weight.shape[0], 1, block)
        args = [self.visit_expr(a) for a in call.args]
        args[anchor.data] = self.visit_expr(codes)
        args[anchor.weight] = relax.const(pack_dense_quads(weight, block))
        extra = [relax.const(weight.astype(np.float32).sum(axis=0))]
        if zero_point is not None:
            extra.append(self.visit_expr(zero_point))

        def compute(*tensors):
            sums, *offset = tensors[len(params):]

            def anchor_compute(_call, data_codes, packed):
                return integer_product(dense_int8(data_codes, packed, self.vnni, tiles), *(offset or [None]), sums)

            return composite_compute(func.body, params, anchor_compute)(*tensors[:len(params)])

        rebind(self, binding, kernel_call(self.builder_, func, compute, [*args, *extra], "int8_", {INT8_ATTR: True}))

    def _vnni_recurrence(self, binding: relax.VarBinding) -> None:
        """The LSTM's sequence kernel on `vpdpbusd` (`compute.recurrent.lstm_vnni_sequence`)."""
        call = binding.value
        func = self.mod[call.args[0]]
        products, recurrent, recurrent_scale, h0, c0 = [self.visit_expr(a) for a in call.args[1].fields]
        codes = recurrent.value.numpy()
        seq, batch = (int(d) for d in products.ty.shape.values[:2])
        reverse = tuple(bool(int(r)) for r in func.attrs[REVERSE_ATTR])
        kernel = lstm_vnni_sequence(seq, batch, int(codes.shape[2]), reverse).with_attrs(dict(func.attrs))
        args = [products, relax.const(pack_recurrent_quads(codes)), relax.const(codes.sum(axis=2, dtype=np.int32)),
                recurrent_scale, h0, c0]
        outputs = list(call.ty_args[0].fields)
        rebind(self, binding, relax.call_tir(self.builder_.add_func(kernel, "lstm_vnni"), args, outputs))
