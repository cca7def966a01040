"""Local response normalization (`tvm_fuse.compute.lrn`): images and channels in parallel; per
channel, its pixels (contiguous in NCHW) a vector at a time: the window's channels loaded,
squared and summed, and the output scaled, in registers. Where the vector does not divide a
channel's pixels (GoogLeNet's and AlexNet's 55 x 55 and 27 x 27), the last few pixels are a
loop of their own, one at a time."""

from __future__ import annotations

import math
from dataclasses import dataclass

from tvm import s_tir

from .common import static_extent


@dataclass(frozen=True)
class LrnKnobs:
    vector: int  # pixels per step: a vector of lanes or a part of one (the remainder one at a time)


def _pixels(sch: s_tir.Schedule, block) -> int:
    """A channel's pixels; 0 where the image's size is symbolic."""
    return math.prod(static_extent(sch.get(loop).extent) for loop in sch.get_loops(block)[2:])


def default_knobs(sch: s_tir.Schedule, block, lanes: int) -> LrnKnobs:
    return knob_space(sch, block, lanes)[0]


def knob_space(sch: s_tir.Schedule, block, lanes: int) -> list[LrnKnobs]:
    pixels = _pixels(sch, block)
    return [LrnKnobs(v) for v in (lanes, lanes // 2, lanes // 4) if v and v <= pixels] or [LrnKnobs(1)]


def schedule(sch: s_tir.Schedule, block, lanes: int, knobs: LrnKnobs | None = None) -> None:
    knobs = knobs or default_knobs(sch, block, lanes)
    pixels = _pixels(sch, block)
    n, c, *spatial = sch.get_loops(block)
    sch.parallel(sch.fuse(n, c))
    if not pixels:  # a symbolic image size: its pixels one at a time
        return
    if knobs.vector > pixels:
        raise ValueError(f"a vector of {knobs.vector} pixels, in a channel of {pixels}")
    flat = sch.fuse(*spatial) if len(spatial) > 1 else spatial[0]
    remainder = pixels % knobs.vector
    if remainder:
        flat, _ = sch.loop_partition(flat, [pixels - remainder, None])
    _, vector = sch.split(flat, [None, knobs.vector])
    sch.vectorize(vector)
