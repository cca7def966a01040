"""Schedule every kernel whose anchor names a rule in `tvm_fuse.schedules` for the target,
with the knobs of the best tuning record for its workload where there is one, else for the
same workload on one image (a batched or dynamic-batch build finds the batch-1 records)."""

from __future__ import annotations

import tvm

from ..schedules import apply
from ..target import isa_class, target_cpu, vector_lanes
from ..tuning.database import TuningDatabase
from ..tuning.workload import workload_keys


def map_prim_funcs(mod: tvm.IRModule, schedule) -> tvm.IRModule:
    """A copy of `mod` with each TIR function replaced by `schedule(name, func)`."""
    scheduled = mod.clone()
    for gvar, func in mod.functions_items():
        if isinstance(func, tvm.tirx.PrimFunc):
            scheduled.update_func(gvar, schedule(gvar.name_hint, func))
    return scheduled


def ApplySchedules(target: tvm.target.Target, tuning: TuningDatabase | None = None) -> tvm.transform.Pass:
    lanes = vector_lanes(target)
    isa, cpu = isa_class(target), target_cpu(target)

    def schedule(func: tvm.tirx.PrimFunc) -> tvm.tirx.PrimFunc:
        record = None
        if tuning:
            record = next(filter(None, (tuning.lookup(key, isa, cpu) for key in workload_keys(func))), None)
        return apply(func, lanes, record.knobs if record else None)

    @tvm.transform.module_pass(opt_level=0, name="tvm_fuse.ApplySchedules")
    def apply_schedules(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        return map_prim_funcs(mod, lambda _name, func: schedule(func))

    return apply_schedules
