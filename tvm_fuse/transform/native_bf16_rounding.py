"""Round fp32 vectors to bf16 with AVX512-BF16's `vcvtneps2bf16` where the target has it.

Our kernels round with integer arithmetic (`compute.bf16.to_bits`: the bits plus 0x7FFF plus
their lowest kept bit, shifted down), which after vectorization is five integer vector ops and
a narrowing move per vector; the instruction does it in one. TVM cannot emit the instruction
itself (its LLVM intrinsic takes `bfloat` vectors, see `compute.bf16`), so this pass finds the
vectorized rounding in each kernel's lowered code and calls a function written in LLVM IR
instead, linked into the kernel (`pragma_import_llvm`), as the bf16 dot product does
(`schedules.intrinsics`). Both round to nearest even; the instruction also flushes denormals
(below 1.2e-38) to zero. Vectors of 16 values only: a narrower rounding (the attention's K and
V, paired two at a time) keeps the integer form. It runs on the host module just before
LowerTVMBuiltin (`TIR_PIPELINE`)."""

from __future__ import annotations

import tvm
import tvm_ffi
from tvm import tirx

from ..target import isa_features
from .relax_helpers import is_op

LANES = 16
_FUNCTION = f"tvm_fuse_cvtneps2bf16_{LANES}"
_INTRINSIC = f"llvm.x86.avx512bf16.cvtneps2bf16.{32 * LANES}"
_LLVM_IR = (
    f"declare <{LANES} x bfloat> @{_INTRINSIC}(<{LANES} x float>)\n"
    f"define <{LANES} x i16> @{_FUNCTION}(<{LANES} x float> %a) {{\n"
    f"  %r = call <{LANES} x bfloat> @{_INTRINSIC}(<{LANES} x float> %a)\n"
    f"  %i = bitcast <{LANES} x bfloat> %r to <{LANES} x i16>\n"
    f"  ret <{LANES} x i16> %i\n}}\n")


def _constant(expr) -> int | None:
    if isinstance(expr, tirx.Broadcast):
        expr = expr.value
    return int(expr.value) if isinstance(expr, tirx.IntImm) else None


def _terms(expr) -> list:
    return _terms(expr.a) + _terms(expr.b) if isinstance(expr, tirx.Add) else [expr]


def _rounded_value(cast: tirx.Cast):
    """The fp32 vector `cast` rounds as `to_bits` does (after vectorization), else None:
    `uint16((bits + (0x7FFF + ((bits >> 16) & 1))) >> 16)`, bits = reinterpret(uint32, v)."""
    shifted = cast.value
    if str(cast.ty) != f"uint16x{LANES}" or not _shift_by_16(shifted):
        return None
    terms = _terms(shifted.a)
    bits = [t for t in terms if is_op(t, "tirx.reinterpret") and str(t.ty) == f"uint32x{LANES}"
            and str(t.args[0].ty) == f"float32x{LANES}"]
    lowest = [t for t in terms if isinstance(t, tirx.BitwiseAnd) and _constant(t.b) == 1 and _shift_by_16(t.a)]
    if len(terms) != 3 or len(bits) != 1 or len(lowest) != 1 or 0x7FFF not in map(_constant, terms) \
            or not tvm_ffi.structural_equal(lowest[0].a.a, bits[0]):
        return None
    return bits[0].args[0]


def _shift_by_16(expr) -> bool:
    return isinstance(expr, tirx.RShift) and _constant(expr.b) == 16


def _native(cast: tirx.Cast):
    value = _rounded_value(cast)
    return cast if value is None else tirx.call_pure_extern(f"uint16x{LANES}", _FUNCTION, value)


def NativeBf16Rounding() -> tvm.transform.Pass:
    @tvm.transform.module_pass(opt_level=0, name="tvm_fuse.NativeBf16Rounding")
    def native(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        updated = mod.clone()
        for gvar, func in mod.functions_items():
            target = func.attrs.get("target") if isinstance(func, tirx.PrimFunc) and func.attrs else None
            if target is None or "avx512_bf16" not in isa_features(target):
                continue
            body = tvm_ffi.structural_map(func.body, (tirx.Cast, _native))
            if not body.same_as(func.body):
                updated.update_func(gvar, func.with_body(
                    tirx.AttrStmt(tirx.const(0, "int32"), "pragma_import_llvm", tvm.ir.StringImm(_LLVM_IR), body)))
        return updated

    return native
