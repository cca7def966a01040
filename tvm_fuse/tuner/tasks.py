"""The tuning tasks of a model: its distinct kernels of ours, unscheduled, each with how many
times a run calls it (kernels of equal workload count as one task)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from functools import cached_property

import numpy as np
import tvm
from tvm import relax, s_tir

from ..pipeline import optimize
from ..schedules.common import anchor_block
from ..tuning.workload import static_dim, workload_key


@dataclass
class Task:
    workload: str
    func: tvm.tirx.PrimFunc  # unscheduled
    calls: int  # per run of the model

    @cached_property
    def rule(self) -> str:
        return anchor_block(s_tir.Schedule(self.func))[1]

    @cached_property
    def extents(self) -> list[int]:
        """The main block's iteration domain (a symbolic dim, a dynamic batch, as 1)."""
        sch = s_tir.Schedule(self.func)
        block, _ = anchor_block(sch)
        return [static_dim(iv.dom.extent) for iv in sch.get(block).iter_vars]

    @cached_property
    def func_json(self) -> str:
        """The kernel as `tvm.ir.save_json`, as the measuring worker receives it."""
        return tvm.ir.save_json(self.func)

    @property
    def flops(self) -> int:
        """2 x the multiply-adds of the main block (its whole iteration domain)."""
        return 2 * int(np.prod(self.extents))


def extract_tasks(mod: tvm.IRModule, target: tvm.target.Target, disabled=(),
                  int8: tvm.transform.Pass | None = None, bf16: tvm.transform.Pass | None = None) -> list[Task]:
    """The tasks of an imported model (its int8 kernels with `int8`, its bf16 ones with
    `bf16`), heaviest call count first."""
    with tvm.transform.PassContext(disabled_pass=["tvm_fuse.ApplySchedules"]):
        optimized = optimize(mod, target, disabled, int8=int8, bf16=bf16)
    calls = Counter(b.value.args[0] for block in optimized["main"].body.blocks for b in block.bindings
                    if isinstance(b.value, relax.Call) and b.value.op.same_as(tvm.ir.Op.get("relax.call_tir")))
    tasks: dict[str, Task] = {}
    for gvar, count in calls.items():
        func = optimized[gvar]
        key = workload_key(func)
        if key is None:
            continue
        if key in tasks:
            tasks[key].calls += count
        else:
            tasks[key] = Task(key, func, count)
    return sorted(tasks.values(), key=lambda t: -t.calls)
