"""Run a kernel's parallel loop serially where its work is too small to pay for the threads.

A parallel loop costs a launch and a join of the thread pool (the calling thread waits for the
others, yielding), a few microseconds, whatever the work. An LSTM unrolled over time runs a
dense layer on one hidden state and its gates' elementwise math per step: hundreds of kernels of
well under a microsecond's work each, where the launches cost more than the work. This pass
counts the values stored under each parallel loop (the product of the loop extents over each
store) and makes the loop serial below `SERIAL_BELOW`, unless the loop calls something whose
work the stores do not show (an AMX tile program, a memset). It runs on the host module just
before LowerTVMBuiltin (`TIR_PIPELINE`)."""

from __future__ import annotations

import tvm
import tvm_ffi
from tvm import tirx

SERIAL_BELOW = 65536  # scalar stores: a few microseconds of one core's vector work


def _stores(stmt: tirx.Stmt) -> int | None:
    """Scalar values `stmt` stores, a vector's lanes each (None: a loop's extent is symbolic,
    or it calls something)."""
    if isinstance(stmt, tirx.For):
        inner = _stores(stmt.body)
        return None if inner is None or not isinstance(stmt.extent, tirx.IntImm) else int(stmt.extent) * inner
    if isinstance(stmt, tirx.BufferStore):
        return tvm.runtime.DataType(str(stmt.value.ty)).lanes
    if isinstance(stmt, tirx.Evaluate) and isinstance(stmt.value, tvm.ir.Call):
        return None  # a tile instruction, a memset: work the stores do not show
    if isinstance(stmt, tirx.SeqStmt | tirx.IfThenElse):  # a branch counted as if both ran
        parts = stmt.seq if isinstance(stmt, tirx.SeqStmt) else [stmt.then_case, stmt.else_case]
        counts = [_stores(part) for part in parts if part is not None]
        return None if None in counts else sum(counts)
    body = getattr(stmt, "body", None)  # allocations, lets, attributes
    return _stores(body) if isinstance(body, tirx.Stmt) else 0


def _serial_if_small(loop: tirx.For) -> tirx.For:
    if loop.kind != tirx.ForKind.PARALLEL:
        return loop
    stores = _stores(loop)
    if stores is None or stores >= SERIAL_BELOW:
        return loop
    return tirx.For(loop.loop_var, loop.min, loop.extent, tirx.ForKind.SERIAL, loop.body, loop.thread_binding,
                    loop.annotations, span=loop.span)


def SerialSmallKernels() -> tvm.transform.Pass:
    @tvm.transform.module_pass(opt_level=0, name="tvm_fuse.SerialSmallKernels")
    def serial(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        return tvm_ffi.structural_map(mod, (tirx.For, _serial_if_small))

    return serial
