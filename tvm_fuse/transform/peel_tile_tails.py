"""Peel the last register tiles of a row that the compute rounded up to whole tiles.

A conv or dense compute that rounds its row up to whole vectors (`compute.conv`'s rows, a
dense layer's padded columns) crops the result as the tile is stored: the store carries a
guard `column < width`. TVM's vectorizer cannot vectorize a store under a guard that differs
between lanes, so it makes the whole store loop scalar, in every tile, though only the last
ones cross the edge. `store_tile` marks such a store (`PEEL_ATTR`); this pass marks its guard
`likely`, and TVM's LoopPartition (`PEELING_CONFIG`, set by `TIR_PIPELINE`) then splits the
tile loop into the tiles where the guard always holds, stored as whole vectors, and the few
at the edge. It runs on the scheduled module, before TVM's lowering, on every kernel but those
marked `UNPEELED_ATTR`: on a few int64-indexed kernels TVM's partition of the loop then fails to
lower or to compile (int32 and int64 mixed in its bounds), and `codegen` compiles those unpeeled."""

from __future__ import annotations

import tvm
import tvm_ffi
from tvm import s_tir, tirx

from ..ir_names import PEEL_ATTR, UNPEELED_ATTR

# LoopPartition splits constant loops too (its default only splits symbolic ones).
PEELING_CONFIG = {"s_tir.LoopPartition": {"partition_const_loop": True}}


def _likely_guard(realize: s_tir.SBlockRealize) -> s_tir.SBlockRealize:
    guard = realize.predicate
    if PEEL_ATTR not in realize.block.annotations or isinstance(guard, tirx.IntImm):
        return realize
    return s_tir.SBlockRealize(realize.iter_values, tirx.likely(guard), realize.block, span=realize.span)


def PeelTileTails() -> tvm.transform.Pass:
    def peeled(func):
        if not isinstance(func, tirx.PrimFunc) or func.attrs is not None and func.attrs.get(UNPEELED_ATTR):
            return func
        return tvm_ffi.structural_map(func, (s_tir.SBlockRealize, _likely_guard))

    @tvm.transform.module_pass(opt_level=0, name="tvm_fuse.PeelTileTails")
    def peel(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        return tvm.IRModule({gvar: peeled(func) for gvar, func in mod.functions.items()}, attrs=mod.attrs)

    return peel
