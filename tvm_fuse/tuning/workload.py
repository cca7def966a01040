"""The workload a kernel computes, as a readable key shared by every model that has it:
its schedule rule and the shapes its main block reads and writes. The fused epilogue is left
out: it changes what happens to each output tile, not which knobs suit the main loop."""

from __future__ import annotations

import tvm
from tvm import s_tir

from ..schedules import RULES
from ..schedules.common import anchor_block


def static_dim(dim) -> int:
    """A dim's value; a symbolic one (a dynamic batch) counts as 1."""
    return int(dim) if isinstance(dim, (int, tvm.tirx.IntImm)) else 1


def workload_key(func: tvm.tirx.PrimFunc, one_image: bool = False) -> str | None:
    """e.g. `tvm_fuse.conv_nchwc(1,16,16,16,16;16,16,3,3,16,16->1,16,14,14,16)`; None for a
    kernel without a schedule rule. `one_image`: the key of the same kernel on a batch of one
    (the images of a rule with a batch axis counted as 1; other keys as they are)."""
    sch = s_tir.Schedule(func)
    found = anchor_block(sch)
    if found is None:
        return None
    block, rule = found
    anchor = sch.get(block)
    batch_axis = RULES[rule].batch_axis if one_image and rule in RULES else None

    def shape(region, images: bool = False) -> str:
        dims = [str(int(d)) if isinstance(d, tvm.tirx.IntImm) else str(d) for d in region.source.shape]
        if images and batch_axis is not None:
            dims[batch_axis] = "1"
        return ",".join(dims)

    reads = ";".join(shape(r, images=i == 0) for i, r in enumerate(anchor.reads))
    return f"{rule}({reads}->{shape(anchor.writes[0], images=True)})"
