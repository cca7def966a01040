"""x86 schedules for tvm_fuse's compute definitions (installed as `tvm_fuse.schedules`).

Compute definitions live in the package (`tvm_fuse.compute`), their schedules here, so each
can change without the other. A kernel's anchor block names its schedule in its
`schedule_rule` attribute; `apply` dispatches on it. Every schedule takes its knobs as a frozen
dataclass with a heuristic default, so a tuner can enumerate them.
"""

from __future__ import annotations

import warnings

import tvm
from tvm import s_tir

from . import conv_nchw, conv_nchwc, dense_packed, matmul, winograd_nchwc
from .common import anchor_block

RULES = {
    "tvm_fuse.conv_nchw": conv_nchw.schedule,
    "tvm_fuse.conv_nchwc": conv_nchwc.schedule,
    "tvm_fuse.depthwise_nchwc": conv_nchwc.schedule_depthwise,
    "tvm_fuse.matmul": matmul.schedule,
    "tvm_fuse.dense_packed": dense_packed.schedule,
    "tvm_fuse.winograd_nchwc": winograd_nchwc.schedule,
}


def apply(func: tvm.tirx.PrimFunc, vector_lanes: int) -> tvm.tirx.PrimFunc:
    """`func` scheduled by the rule its anchor block names; unchanged if it names none."""
    sch = s_tir.Schedule(func)
    found = anchor_block(sch)
    if found is None:
        return func
    block, rule = found
    try:
        RULES[rule](sch, block, vector_lanes)
    except (s_tir.ScheduleError, tvm.error.InternalError) as error:
        # Still correct, only slow: say so rather than fail the build.
        warnings.warn(f"schedule {rule} does not apply to this kernel, left unscheduled: {error}")
        return func
    return sch.mod["main"]
