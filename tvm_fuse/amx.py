"""The operating system's side of AMX: Linux runs tile instructions only in a process that asked.

The CPU may have AMX while the kernel keeps its tile state off (XCR0 bits 17-18 clear, as some
hypervisors do), and even where the kernel supports it, a process must ask once with
`arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)` before its first tile instruction, or that
instruction raises SIGILL. `amx_permitted` does both checks and asks; AMX counts as a host
feature only when it returns True.
"""

from __future__ import annotations

import ctypes
import functools
import platform
import sys

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
