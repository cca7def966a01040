"""int8 dense layers (`tvm_fuse.compute.dense_int8`): the fp32 dense kernel's tile (its knobs) of
s32 accumulators, each step a block x 4 u8 x s8 dot product tensorized as VNNI's `vpdpbusd` (or
`vpmaddubsw` + `vpmaddwd`); the epilogue (dequantization per row and column, then the layer's
post-ops) applied to the tile (`dense_dot`).

On rows quantized in groups (`dense_int8_groups`) the tile is of fp32 accumulators, and each
group's s32 tile beside it: summed over the group, then scaled into the fp32 tile."""

from __future__ import annotations

from tvm import s_tir

from ..ir_names import DOT_PRODUCT_ATTR
from .common import (
    accumulate_in_registers,
    accumulator_budget,
    compute_at_group,
    divisor,
    inline_epilogue,
    store_tile,
    vectorize_innermost,
)
from .dense_dot import default_knobs, schedule_dot_product_dense
from .dense_packed import DensePackedKnobs, tile_space
from .intrinsics import dot_product


def _vnni(sch: s_tir.Schedule, block) -> bool:
    return str(sch.get(block).annotations.get(DOT_PRODUCT_ATTR, "vnni")) == "vnni"


def schedule(sch: s_tir.Schedule, block, lanes: int, knobs: DensePackedKnobs | None = None) -> None:
    knobs = knobs or default_knobs(sch, block, lanes)
    schedule_dot_product_dense(sch, block, lanes, knobs, lambda width: dot_product(width, _vnni(sch, block)))


def _group_extents(sch: s_tir.Schedule, block) -> tuple:
    """(rows, columns, the packed weight's block)."""
    (sums,) = sch.get_producers(block)
    width = int(sch.get(sums).reads[1].source.shape[2])
    *_, rows, columns, _ = (sch.get(loop).extent for loop in sch.get_loops(block))
    return rows, columns // width, width


def default_group_knobs(sch: s_tir.Schedule, block, lanes: int) -> DensePackedKnobs:
    """Half the fp32 dense tile's accumulators: the s32 tile takes as many registers again."""
    rows, vectors, _ = _group_extents(sch, block)
    row_tile = divisor(rows, [4, 2])
    budget = accumulator_budget(lanes, 12) // row_tile
    return DensePackedKnobs(row_tile, divisor(vectors, range(min(4, budget), 0, -1)))


def group_knob_space(sch: s_tir.Schedule, block, lanes: int) -> list[DensePackedKnobs]:
    rows, vectors, _ = _group_extents(sch, block)
    return [k for k in tile_space(rows, vectors, lanes) if k.row_tile * k.column_tile <= 14]


def schedule_groups(sch: s_tir.Schedule, block, lanes: int, knobs: DensePackedKnobs | None = None) -> None:
    knobs = knobs or default_group_knobs(sch, block, lanes)
    (sums,) = sch.get_producers(block)
    *_, width = _group_extents(sch, block)
    epilogue = inline_epilogue(sch, block)
    *lead, rows, columns, groups = sch.get_loops(block)
    rows_out, rows_in = sch.split(rows, [None, knobs.row_tile])
    columns_out, column_blocks, columns_in = sch.split(columns, [None, knobs.column_tile, width])
    sch.reorder(columns_out, *lead, rows_out, groups, rows_in, column_blocks, columns_in)
    outer = sch.fuse(columns_out, *lead, rows_out)  # a strip of weights serves every row (`dense_packed`)
    sch.parallel(outer)
    write_back = accumulate_in_registers(sch, block, outer, [column_blocks, rows_in], columns_in, groups, lanes)
    # (rows, columns, steps, quad), but a row loop of extent 1 (a tile of one row) is gone too
    *sum_rows, sum_columns, steps, quad = compute_at_group(sch, sums, groups)
    sum_blocks, sum_lanes = sch.split(sum_columns, [knobs.column_tile, width])
    sch.reorder(steps, *sum_rows, sum_blocks, sum_lanes, quad)
    init = sch.decompose_reduction(sums, steps)
    vectorize_innermost(sch, init, lanes)
    for loop in (*sum_rows, sum_blocks):
        sch.unroll(loop)
    sch.tensorize(sum_lanes, dot_product(width, _vnni(sch, block)))
    store_tile(sch, write_back, epilogue, outer, lanes)
