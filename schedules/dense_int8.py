"""int8 dense layers (`tvm_fuse.compute.dense_int8`): the fp32 dense kernel's tile (its knobs) of
s32 accumulators, each step a block x 4 u8 x s8 dot product tensorized as VNNI's `vpdpbusd` (or
`vpmaddubsw` + `vpmaddwd`); the epilogue (dequantization per row and column, then the layer's
post-ops) applied to the tile (`dense_dot`)."""

from __future__ import annotations

from tvm import s_tir

from ..compute import DOT_PRODUCT_ATTR
from .dense_dot import default_knobs, schedule_dot_product_dense
from .dense_packed import DensePackedKnobs
from .intrinsics import dot_product


def schedule(sch: s_tir.Schedule, block, lanes: int, knobs: DensePackedKnobs | None = None) -> None:
    knobs = knobs or default_knobs(sch, block, lanes)
    vnni = str(sch.get(block).annotations.get(DOT_PRODUCT_ATTR, "vnni")) == "vnni"
    schedule_dot_product_dense(sch, block, lanes, knobs, lambda width: dot_product(width, vnni))
