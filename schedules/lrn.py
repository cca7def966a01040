"""Local response normalization (`tvm_fuse.compute.lrn`): images and channels in parallel; per
channel, its pixels (contiguous in NCHW) a vector at a time: the window's channels loaded,
squared and summed, and the output scaled, in registers."""

from __future__ import annotations

import math
from dataclasses import dataclass

from tvm import s_tir

from .common import divisor, static_extent


@dataclass(frozen=True)
class LrnKnobs:
    vector: int  # pixels per step: a vector of lanes or a part of one


def _pixels(sch: s_tir.Schedule, block) -> int:
    return math.prod(static_extent(sch.get(loop).extent) for loop in sch.get_loops(block)[2:])


def default_knobs(sch: s_tir.Schedule, block, lanes: int) -> LrnKnobs:
    return LrnKnobs(divisor(_pixels(sch, block), [lanes >> s for s in range(lanes.bit_length())]))


def knob_space(sch: s_tir.Schedule, block, lanes: int) -> list[LrnKnobs]:
    pixels = _pixels(sch, block)
    return [LrnKnobs(v) for v in (lanes, lanes // 2, lanes // 4) if v and pixels % v == 0]


def schedule(sch: s_tir.Schedule, block, lanes: int, knobs: LrnKnobs | None = None) -> None:
    knobs = knobs or default_knobs(sch, block, lanes)
    pixels = _pixels(sch, block)
    if pixels % knobs.vector:
        raise ValueError(f"{knobs.vector} does not divide the {pixels} pixels of a channel")
    n, c, *spatial = sch.get_loops(block)
    sch.parallel(sch.fuse(n, c))
    flat = sch.fuse(*spatial) if len(spatial) > 1 else spatial[0]
    _, vector = sch.split(flat, [None, knobs.vector])
    sch.vectorize(vector)
