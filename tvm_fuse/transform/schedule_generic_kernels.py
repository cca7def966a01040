"""Schedule the kernels TVM lowered itself (see `tvm_fuse.schedules.generic`); ours are
scheduled already and left alone."""

from __future__ import annotations

import warnings

import tvm
from tvm import s_tir

from ..ir_names import KERNEL_ATTR, PATTERN_ATTR
from ..schedules import generic
from ..target import vector_lanes
from .apply_schedules import map_prim_funcs


def ScheduleGenericKernels(target: tvm.target.Target) -> tvm.transform.Pass:
    lanes = vector_lanes(target)

    def schedule(name: str, func: tvm.tirx.PrimFunc) -> tvm.tirx.PrimFunc:
        if any(attr in (func.attrs or {}) for attr in (PATTERN_ATTR, KERNEL_ATTR)):
            return func
        try:
            return generic.schedule(func, target, lanes)
        except (s_tir.ScheduleError, tvm.error.InternalError) as error:
            warnings.warn(f"generic schedule does not apply to {name}, left unscheduled: {error}")
            return func

    @tvm.transform.module_pass(opt_level=0, name="tvm_fuse.ScheduleGenericKernels")
    def schedule_all(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        return map_prim_funcs(mod, schedule)

    return schedule_all
