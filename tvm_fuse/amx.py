"""The operating system's side of AMX: Linux runs tile instructions only in a process that asked.

The CPU may have AMX while the kernel keeps its tile state off (XCR0 bits 17-18 clear, as some
hypervisors do), and even where the kernel supports it, a process must ask once with
`arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)` before its first tile instruction, or that
instruction raises SIGILL. `amx_permitted` does both checks and asks; AMX counts as a host
feature only when it returns True, and a compiled model whose kernels run tile programs
(`uses_tiles`) refuses to run in a process where it is False.
"""

from __future__ import annotations

import ctypes
import functools
import platform
import sys

import tvm
import tvm_ffi

_SYS_ARCH_PRCTL = 158  # x86-64
_ARCH_GET_XCOMP_SUPP = 0x1021  # the xfeatures the kernel supports (what it enabled in XCR0)
_ARCH_REQ_XCOMP_PERM = 0x1023
_XFEATURE_XTILECFG, _XFEATURE_XTILEDATA = 17, 18
_TILE_STATE = (1 << _XFEATURE_XTILECFG) | (1 << _XFEATURE_XTILEDATA)


@functools.cache
def amx_permitted() -> bool:
    """True when the kernel supports AMX tile state and has granted this process its use
    (asked for here, once; granting is idempotent and lasts for the process)."""
    if sys.platform != "linux" or platform.machine() != "x86_64":
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    supported = ctypes.c_uint64(0)
    if libc.syscall(_SYS_ARCH_PRCTL, _ARCH_GET_XCOMP_SUPP, ctypes.byref(supported)) != 0:
        return False  # a kernel older than 5.16 knows no AMX
    if supported.value & _TILE_STATE != _TILE_STATE:
        return False
    return libc.syscall(_SYS_ARCH_PRCTL, _ARCH_REQ_XCOMP_PERM, _XFEATURE_XTILEDATA) == 0


def uses_tiles(mod: tvm.IRModule) -> bool:
    """Whether any kernel of `mod` runs AMX tile instructions: every tile program starts by
    loading its configuration (`llvm.x86.ldtilecfg`)."""
    from tvm.target import codegen

    call_llvm_intrin = tvm.ir.Op.get("tirx.call_llvm_intrin")
    ldtilecfg = codegen.llvm_lookup_intrinsic_id("llvm.x86.ldtilecfg")
    found = []

    def visit(call: tvm.ir.expr.Call) -> None:
        if call.op.same_as(call_llvm_intrin) and int(call.args[0]) == ldtilecfg:
            found.append(call)

    for func in mod.functions.values():
        if isinstance(func, tvm.tirx.PrimFunc):
            tvm_ffi.structural_walk(func.body, (tvm.ir.expr.Call, visit))
    return bool(found)
