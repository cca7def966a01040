"""The dense kernel whose step is a dot product over a group of the reduction (bf16: pairs into
fp32, `dense_bf16`; int8: u8 x s8 quads into s32, `dense_int8`): the fp32 dense kernel's tile
(its knobs) of `row_tile` rows x `column_tile` column blocks of accumulators over the packed
weight [N/b, K/g, b, g], each step one tensor intrinsic on a block's accumulator vector, the
epilogue applied to the tile."""

from __future__ import annotations

from collections.abc import Callable

from tvm import s_tir

from .common import accumulate_in_registers, inline_epilogue, store_tile, vectorize_innermost
from .dense_packed import DensePackedKnobs, default_tile, tile_space


def block_width(sch: s_tir.Schedule, block) -> int:
    """Columns per accumulator: the packed weight's block."""
    return int(sch.get(block).reads[1].source.shape[2])


def _extents(sch: s_tir.Schedule, block) -> tuple:
    """(rows, accumulator vectors of columns)."""
    *_, rows, columns, _, _ = (sch.get(loop).extent for loop in sch.get_loops(block))
    return rows, columns // block_width(sch, block)


def default_knobs(sch: s_tir.Schedule, block, lanes: int) -> DensePackedKnobs:
    return default_tile(*_extents(sch, block), lanes)


def knob_space(sch: s_tir.Schedule, block, lanes: int) -> list[DensePackedKnobs]:
    return tile_space(*_extents(sch, block), lanes)


def schedule_dot_product_dense(sch: s_tir.Schedule, block, lanes: int, knobs: DensePackedKnobs,
                               intrinsic: Callable[[int], str]) -> None:
    """`intrinsic(width)`: the tensor intrinsic's name for a block of `width` accumulators. An
    input the kernel converts first (fp32 rounded to bf16) is converted in one parallel pass."""
    width = block_width(sch, block)
    epilogue = inline_epilogue(sch, block)
    for conversion in sch.get_producers(block):
        *outer_loops, _ = sch.get_loops(conversion)
        if outer_loops:
            sch.parallel(sch.fuse(*outer_loops))
        vectorize_innermost(sch, conversion, lanes)
    *lead, rows, columns, groups, group = sch.get_loops(block)
    rows_out, rows_in = sch.split(rows, [None, knobs.row_tile])
    columns_out, column_blocks, columns_in = sch.split(columns, [None, knobs.column_tile, width])
    sch.reorder(columns_out, *lead, rows_out, groups, rows_in, column_blocks, columns_in, group)
    outer = sch.fuse(columns_out, *lead, rows_out)  # a strip of weights serves every row (`dense_packed`)
    sch.parallel(outer)
    write_back = accumulate_in_registers(sch, block, outer, [column_blocks, rows_in], None, groups, lanes)
    sch.tensorize(columns_in, intrinsic(width))
    store_tile(sch, write_back, epilogue, outer, lanes)
