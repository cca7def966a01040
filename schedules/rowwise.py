"""Normalizations along the last axis (`tvm_fuse.compute.rowwise`: layer norm, softmax): rows
in parallel, `row_tile` to a task; every stage of a row computed at the row: its partial
reductions with the lanes innermost (unrolled: TVM cannot vectorize a reduction's spatial
loop inside its reduction loop, LLVM does), its full-width stages (softmax's exponentials,
the output) a vector at a time. A row quantization's per-group max and min (`group_*`
stages) combine their lanes in halves (`intrinsics.across`)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from tvm import s_tir

from .common import static_extent, vectorize_with_tail
from .intrinsics import across


@dataclass(frozen=True)
class RowwiseKnobs:
    row_tile: int = 1  # rows per parallel task


def _stages(sch: s_tir.Schedule) -> tuple[list, object]:
    """(the kernel's other blocks, in order; its output block): the widest block no other
    reads (a row quantization also writes each row's scale, a block of its own)."""
    blocks = list(sch.get_child_blocks(sch.get_sblock("root")))
    outputs = [b for b in blocks if not sch.get_consumers(b)]
    output = max(outputs, key=lambda b: static_extent(sch.get(sch.get_loops(b)[-1]).extent))
    return [b for b in blocks if b != output], output


def _rows(sch: s_tir.Schedule) -> int:
    """Rows normalized (0 when symbolic)."""
    _, output = _stages(sch)
    extents = [static_extent(sch.get(loop).extent) for loop in sch.get_loops(output)[:-1]]
    return 0 if 0 in extents else math.prod(extents)


def default_knobs(sch: s_tir.Schedule, block, lanes: int) -> RowwiseKnobs:
    return RowwiseKnobs()


def knob_space(sch: s_tir.Schedule, block, lanes: int) -> list[RowwiseKnobs]:
    rows = _rows(sch)
    return [RowwiseKnobs(t) for t in (1, 2, 4, 8) if rows and rows % t == 0]


def schedule(sch: s_tir.Schedule, block, lanes: int, knobs: RowwiseKnobs | None = None) -> None:
    knobs = knobs or default_knobs(sch, block, lanes)
    stages, output = _stages(sch)
    width = len(sch.get_loops(output))
    for stage in stages:  # a full-width stage only the next full-width stage reads (softmax's shift)
        consumers = sch.get_consumers(stage)
        if len(sch.get_loops(stage)) == width and not _reduces(sch, stage) and len(consumers) == 1 \
                and len(sch.get_loops(consumers[0])) == width and not _reduces(sch, consumers[0]):
            sch.compute_inline(stage)
    stages, output = _stages(sch)
    extra_outputs = [s for s in stages if not sch.get_consumers(s)]  # a row quantization's scales
    rows = sch.fuse(*sch.get_loops(output)[:-1])
    if extra_outputs:  # one row loop for every output, so that the reductions they read can move into it
        rows = sch.merge(rows, *(sch.fuse(*sch.get_loops(s)[:-1]) for s in extra_outputs))
    row_out, row_in = sch.split(rows, [None, knobs.row_tile])
    sch.parallel(row_out)
    for stage in reversed(stages):  # each before its reader, inside the row
        if stage not in extra_outputs:
            sch.compute_at(stage, row_in)
    for stage in stages:
        inner = sch.get_loops(stage)[2:]  # under (row_out, row_in)
        name = sch.get(stage).name_hint
        if name.startswith("partial") and len(inner) == 2:  # (lane, group): lanes in one vector
            lane, group = inner
            sch.reorder(group, lane)
            init = sch.decompose_reduction(stage, group)
            sch.vectorize(sch.get_loops(init)[-1])
            sch.unroll(lane)
        elif not _reduces(sch, stage) and inner:  # a full-width stage
            vectorize_with_tail(sch, stage, lanes)
        elif name.startswith("group_") and len(inner) == 1:  # a group's max or min across its lanes
            sch.decompose_reduction(stage, inner[0])
            sch.tensorize(sch.get_loops(stage)[-1], across(name[len("group_"):], static_extent(
                sch.get(inner[0]).extent)))
    vectorize_with_tail(sch, output, lanes)


def _reduces(sch: s_tir.Schedule, block) -> bool:
    return any(iv.iter_type == 2 for iv in sch.get(block).iter_vars)
