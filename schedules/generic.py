"""The kernels TVM lowers itself (layout transforms, pooling, elementwise groups, softmax,
layer norm): each top-level block's leading data-parallel loops fused into one parallel loop,
and the innermost loop of an elementwise block vectorized when the vector width divides it.
(TVM's dlight CPU reduction rule was tried for softmax: 2 ms instead of 4 us on [1, 1000].)"""

from __future__ import annotations

import tvm
from tvm import s_tir

_PARALLEL_MIN = 64  # fuse leading loops until there is this much parallel work


def schedule(func: tvm.tirx.PrimFunc, target: tvm.target.Target, lanes: int) -> tvm.tirx.PrimFunc:
    sch = s_tir.Schedule(func)
    try:
        root = sch.get_sblock("root")
    except s_tir.ScheduleError:  # hand-written TIR (TVM's cumsum, sort): leave it as written
        return func
    for block in sch.get_child_blocks(root):
        loops = sch.get_loops(block)
        iters = sch.get(block).iter_vars
        spatial = [loop for loop, it in zip(loops, iters) if it.iter_type == 0]  # data parallel
        if len(spatial) != len(loops[: len(spatial)]) or not spatial:
            continue
        lead, extent = [], 1
        for loop in spatial[:-1]:
            lead.append(loop)
            extent *= _extent(sch, loop) or _PARALLEL_MIN
            if extent >= _PARALLEL_MIN:
                break
        if lead:
            sch.parallel(sch.fuse(*lead) if len(lead) > 1 else lead[0])
        innermost = loops[-1]
        written = {str(region.source.dtype) for region in sch.get(block).writes}
        vectorizable = written <= {"float32", "int32"}  # LLVM cannot vectorize bool stores
        if vectorizable and len(loops) == len(spatial) and _extent(sch, innermost) and _extent(sch, innermost) % lanes == 0:
            _, inner = sch.split(innermost, [None, lanes])
            sch.vectorize(inner)
    return sch.mod["main"]


def _extent(sch: s_tir.Schedule, loop) -> int | None:
    value = sch.get(loop).extent
    return int(value) if isinstance(value, tvm.tirx.IntImm) else None
