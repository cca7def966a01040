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


def workload_key(func: tvm.tirx.PrimFunc) -> str | None:
    """e.g. `tvm_fuse.conv_nchwc(1,16,16,16,16;16,16,3,3,16,16->1,16,14,14,16)`; None for a
    kernel without a schedule rule."""
    keys = workload_keys(func)
    return keys[0] if keys else None


def workload_keys(func: tvm.tirx.PrimFunc) -> list[str]:
    """`func`'s workload key, then, where its rule has a batch axis and the batch is not 1, the
    key of the same kernel on one image (whose records a batched build falls back on); [] for a
    kernel without a schedule rule."""
    sch = s_tir.Schedule(func)
    found = anchor_block(sch)
    if found is None:
        return []
    block, rule = found
    anchor = sch.get(block)
    batch_axis = RULES[rule].batch_axis if rule in RULES else None

    def shape(region, one_image: bool) -> str:
        dims = [str(int(d)) if isinstance(d, tvm.tirx.IntImm) else str(d) for d in region.source.shape]
        if one_image:
            dims[batch_axis] = "1"
        return ",".join(dims)

    def key(one_image: bool) -> str:  # the images are the data's (the first read) and the output's
        reads = ";".join(shape(r, one_image and i == 0) for i, r in enumerate(anchor.reads))
        return f"{rule}({reads}->{shape(anchor.writes[0], one_image)})"

    keys = [key(one_image=False)] + ([key(one_image=True)] if batch_axis is not None else [])
    return list(dict.fromkeys(keys))  # a batch of one has the one key
