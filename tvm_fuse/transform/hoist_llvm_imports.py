"""Import each LLVM IR function a kernel links (`pragma_import_llvm`) once per module.

A tensor intrinsic written in LLVM IR (the bf16 dot product, `schedules.intrinsics`; the bf16
rounding, `NativeBf16Rounding`) carries its import inside its body, so unrolling copies it to
every call: thousands of imports in a bf16 CNN, each parsed and linked into the module at code
generation, which took most of a bf16 build (DenseNet-121: 22 of 30 s). LLVM links every import
into the whole module, so one per distinct function serves all kernels: this pass drops the
copies and wraps the first kernel that uses each function in its one import. It runs on the
host module just before LowerTVMBuiltin (`TIR_PIPELINE`).
"""

from __future__ import annotations

import tvm
import tvm_ffi
from tvm import tirx

IMPORT = "pragma_import_llvm"


def _without_imports(body: tirx.Stmt, found: list[str]) -> tirx.Stmt:
    """`body` without its imports, whose code is appended to `found` (each once)."""

    def drop(attr: tirx.AttrStmt):
        if attr.attr_key != IMPORT:
            return attr
        code = str(attr.value.value)
        if code not in found:
            found.append(code)
        return attr.body

    return tvm_ffi.structural_map(body, (tirx.AttrStmt, drop))


def HoistLlvmImports() -> tvm.transform.Pass:
    @tvm.transform.module_pass(opt_level=0, name="tvm_fuse.HoistLlvmImports")
    def hoist(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        updated, imported = mod.clone(), set()
        for gvar, func in mod.functions_items():
            if not isinstance(func, tirx.PrimFunc):
                continue
            found: list[str] = []
            body = _without_imports(func.body, found)
            if body.same_as(func.body):
                continue
            for code in found:
                if code not in imported:
                    imported.add(code)
                    body = tirx.AttrStmt(tirx.const(0, "int32"), IMPORT, tvm.ir.StringImm(code), body)
            updated.update_func(gvar, func.with_body(body))
        return updated

    return hoist
