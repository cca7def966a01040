"""HoistLlvmImports: each LLVM IR function kernels import is imported once per module, however
often unrolling copied its import, and the kernels still call it."""

import numpy as np
import tvm
from tvm.script import tirx as T

from tvm_fuse.transform.hoist_llvm_imports import IMPORT, HoistLlvmImports

DOUBLE = "define float @twice(float %x) {\n  %r = fadd float %x, %x\n  ret float %r\n}\n"


def _kernel(name: str):
    @T.prim_func
    def kernel(a: T.Buffer((4,), "float32"), b: T.Buffer((4,), "float32")):
        T.func_attr({"global_symbol": name})
        # What unrolling leaves: the import at every call.
        with T.attr(0, "pragma_import_llvm", DOUBLE):
            b[0] = T.call_pure_extern("float32", "twice", a[0])
        with T.attr(0, "pragma_import_llvm", DOUBLE):
            b[1] = T.call_pure_extern("float32", "twice", a[1])
        with T.attr(0, "pragma_import_llvm", DOUBLE):
            b[2] = T.call_pure_extern("float32", "twice", a[2])
        with T.attr(0, "pragma_import_llvm", DOUBLE):
            b[3] = T.call_pure_extern("float32", "twice", a[3])

    return kernel


def _imports(func) -> int:
    return func.script().count(IMPORT)


def test_one_import_per_module_and_the_kernels_still_run():
    mod = tvm.IRModule({"first": _kernel("first"), "second": _kernel("second")})
    assert sum(_imports(f) for f in mod.functions.values()) == 8
    hoisted = HoistLlvmImports()(mod)
    assert sorted(_imports(f) for f in hoisted.functions.values()) == [0, 1]
    library = tvm.compile(hoisted, target="llvm")
    a = tvm.runtime.tensor(np.arange(4, dtype=np.float32))
    for name in ("first", "second"):
        b = tvm.runtime.tensor(np.zeros(4, np.float32))
        library[name](a, b)
        assert b.numpy().tolist() == [0.0, 2.0, 4.0, 6.0]
