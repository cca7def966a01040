"""The compilation pipeline, phase by phase, top to bottom.

Each phase is a function returning named TVM passes, so `PassContext(disabled_pass=[...])`
can switch any one off. Later phases (fusion, blocked layouts, quantization, tuned schedules)
slot in between `canonicalize` and `lower`.
"""

from __future__ import annotations

import tvm
from tvm import relax
from tvm.relax.backend.cpu_generic import pipeline as cpu_generic


def canonicalize(target: tvm.target.Target) -> list[tvm.transform.Pass]:
    """Inference-only forms (batch-norm to arithmetic) and folded constants."""
    return [
        relax.transform.DecomposeOpsForInference(),
        relax.transform.FoldConstant(),
    ]


def lower(target: tvm.target.Target) -> list[tvm.transform.Pass]:
    """Relax ops to TIR kernels, then to what the VM executes: TVM's CPU backend."""
    return (
        cpu_generic.library_dispatch_passes(target)
        + cpu_generic.legalize_passes(target)
        + cpu_generic.dataflow_lower_passes(target)
        + cpu_generic.finalize_passes(target)
    )


PHASES = (canonicalize, lower)


def relax_pipeline(target: tvm.target.Target) -> tvm.transform.Pass:
    """All phases as one pass for `tvm.compile(..., relax_pipeline=...)`."""
    passes = [p for phase in PHASES for p in phase(target)]
    sequential = tvm.transform.Sequential(passes, name="tvm_fuse")

    @tvm.transform.module_pass(opt_level=0, name="tvm_fuse.pipeline")
    def run_in_target(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        with target:  # legalization reads the target from the context
            return sequential(mod)

    return run_in_target
