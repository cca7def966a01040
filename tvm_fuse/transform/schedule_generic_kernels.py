"""Schedule the kernels TVM lowered itself (see `tvm_fuse.schedules.generic`); ours are
scheduled already and left alone."""

from __future__ import annotations

import warnings

import tvm
from tvm import s_tir

from ..patterns.table import PATTERN_ATTR
from ..schedules import generic
from .apply_schedules import vector_lanes
from .lower_matmuls import KERNEL_ATTR


def ScheduleGenericKernels(target: tvm.target.Target) -> tvm.transform.Pass:
    lanes = vector_lanes(target)

    @tvm.transform.module_pass(opt_level=0, name="tvm_fuse.ScheduleGenericKernels")
    def schedule_all(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        scheduled = mod.clone()
        for gvar, func in mod.functions_items():
            if not isinstance(func, tvm.tirx.PrimFunc) or any(a in (func.attrs or {}) for a in (PATTERN_ATTR, KERNEL_ATTR)):
                continue
            try:
                scheduled.update_func(gvar, generic.schedule(func, target, lanes))
            except (s_tir.ScheduleError, tvm.error.InternalError) as error:
                warnings.warn(f"generic schedule does not apply to {gvar.name_hint}, left unscheduled: {error}")
        return scheduled

    return schedule_all
