"""Keep small `local` buffers of CPU kernels (register tiles, scalars of tensorized
intrinsics) on the stack.

TVM's LowerTVMBuiltin turns every `local` allocation into a TVMBackendAllocWorkspace /
FreeWorkspace pair, and for a register tile under a parallel loop that pair runs once per
task: about 60 ns, against tasks of a few microseconds in an int8 conv. Only `global`
buffers under 1 KB stay on the stack there, or allocations marked `disable_lower_builtin`,
which this pass marks. On the stack LLVM then keeps an unrolled tile in registers, with no
call at all. It runs on the host module just before LowerTVMBuiltin (`TIR_PIPELINE`)."""

from __future__ import annotations

import math

import tvm
import tvm_ffi
from tvm import tirx

STACK_LIMIT_BYTES = 8192  # a few register files' worth; larger buffers stay workspace
_DISABLE_LOWER_BUILTIN = "disable_lower_builtin"  # TVM's kDisableLowerTVMBuiltin


def _allocation_bytes(buffer: tirx.Buffer) -> int | None:
    """The buffer's size in bytes, None if its shape is not constant."""
    if not all(isinstance(extent, tirx.IntImm) for extent in buffer.shape):
        return None
    dtype = tvm.runtime.DataType(buffer.dtype)
    return math.prod(int(extent) for extent in buffer.shape) * dtype.bits * dtype.lanes // 8


def _on_stack(alloc: tirx.AllocBuffer) -> tirx.AllocBuffer:
    size = _allocation_bytes(alloc.buffer)
    if alloc.buffer.scope() != "local" or size is None or size > STACK_LIMIT_BYTES:
        return alloc
    annotations = {**alloc.annotations, _DISABLE_LOWER_BUILTIN: tirx.IntImm("bool", 1)}
    return tirx.AllocBuffer(alloc.buffer, annotations=annotations, span=alloc.span)


def StackLocalBuffers() -> tvm.transform.Pass:
    @tvm.transform.module_pass(opt_level=0, name="tvm_fuse.StackLocalBuffers")
    def stack(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        return tvm_ffi.structural_map(mod, (tirx.AllocBuffer, _on_stack))

    return stack
