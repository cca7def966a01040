"""int8 dense layers (`tvm_fuse.compute.dense_int8`): the fp32 dense kernel's tile (its knobs) of
`row_tile` rows x `column_tile` column blocks of s32 accumulators, each step a block x 4
u8 x s8 dot product tensorized as VNNI's `vpdpbusd` (or `vpmaddubsw` + `vpmaddwd`); the
epilogue (dequantization per row and column, then the layer's post-ops) applied to the tile."""

from __future__ import annotations

from tvm import s_tir

from ..compute import DOT_PRODUCT_ATTR
from .common import accumulate_in_registers, inline_epilogue, store_tile
from .dense_packed import DensePackedKnobs, default_tile, tile_space
from .intrinsics import dot_product


def _block(sch: s_tir.Schedule, block) -> int:
    """Columns per accumulator: the packed weight's block."""
    return int(sch.get(block).reads[1].source.shape[2])


def _extents(sch: s_tir.Schedule, block) -> tuple:
    *_, rows, columns, _, _ = (sch.get(loop).extent for loop in sch.get_loops(block))
    return rows, columns // _block(sch, block)


def default_knobs(sch: s_tir.Schedule, block, lanes: int) -> DensePackedKnobs:
    return default_tile(*_extents(sch, block), lanes)


def knob_space(sch: s_tir.Schedule, block, lanes: int) -> list[DensePackedKnobs]:
    return tile_space(*_extents(sch, block), lanes)


def schedule(sch: s_tir.Schedule, block, lanes: int, knobs: DensePackedKnobs | None = None) -> None:
    knobs = knobs or default_knobs(sch, block, lanes)
    width = _block(sch, block)
    vnni = str(sch.get(block).annotations.get(DOT_PRODUCT_ATTR, "vnni")) == "vnni"
    epilogue = inline_epilogue(sch, block)
    *lead, rows, columns, quads, quad = sch.get_loops(block)
    rows_out, rows_in = sch.split(rows, [None, knobs.row_tile])
    columns_out, column_blocks, columns_in = sch.split(columns, [None, knobs.column_tile, width])
    sch.reorder(*lead, rows_out, columns_out, quads, rows_in, column_blocks, columns_in, quad)
    outer = sch.fuse(*lead, rows_out, columns_out)
    sch.parallel(outer)
    write_back = accumulate_in_registers(sch, block, outer, [column_blocks, rows_in], None, quads, lanes)
    sch.tensorize(columns_in, dot_product(width, vnni))
    store_tile(sch, write_back, epilogue, outer, lanes)
