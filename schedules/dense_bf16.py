"""bf16 dense layers (`tvm_fuse.compute.dense_bf16`): the fp32 dense kernel's tile (its knobs),
each step a block x 2 bf16 pair dot product tensorized as `vdpbf16ps` (or its portable form);
an fp32 input rounded to bf16 in one pass before the tiles (`dense_dot`)."""

from __future__ import annotations

from tvm import s_tir

from ..ir_names import DOT_PRODUCT_ATTR
from .dense_dot import default_knobs, schedule_dot_product_dense
from .dense_packed import DensePackedKnobs
from .intrinsics import bf16_dot_product


def schedule(sch: s_tir.Schedule, block, lanes: int, knobs: DensePackedKnobs | None = None) -> None:
    knobs = knobs or default_knobs(sch, block, lanes)
    native = str(sch.get(block).annotations.get(DOT_PRODUCT_ATTR, "vdpbf16ps")) == "vdpbf16ps"
    schedule_dot_product_dense(sch, block, lanes, knobs, lambda width: bf16_dot_product(width, native))
