"""bf16 dense layers (`tvm_fuse.compute.dense_bf16`): the fp32 dense kernel's tile (its knobs) of
`row_tile` rows x `column_tile` column blocks of fp32 accumulators, each step a block x 2 bf16
pair dot product tensorized as `vdpbf16ps` (or its portable form); an fp32 input rounded to bf16
in one pass before the tiles."""

from __future__ import annotations

from tvm import s_tir

from ..compute import DOT_PRODUCT_ATTR
from .common import accumulate_in_registers, inline_epilogue, store_tile, vectorize_innermost
from .dense_packed import DensePackedKnobs, default_tile, tile_space
from .intrinsics import bf16_dot_product


def _block(sch: s_tir.Schedule, block) -> int:
    """Columns per accumulator: the packed weight's block."""
    return int(sch.get(block).reads[1].source.shape[2])


def default_knobs(sch: s_tir.Schedule, block, lanes: int) -> DensePackedKnobs:
    *_, rows, columns, _, _ = (sch.get(loop).extent for loop in sch.get_loops(block))
    return default_tile(rows, columns // _block(sch, block), lanes)


def knob_space(sch: s_tir.Schedule, block, lanes: int) -> list[DensePackedKnobs]:
    *_, rows, columns, _, _ = (sch.get(loop).extent for loop in sch.get_loops(block))
    return tile_space(rows, columns // _block(sch, block), lanes)


def schedule(sch: s_tir.Schedule, block, lanes: int, knobs: DensePackedKnobs | None = None) -> None:
    knobs = knobs or default_knobs(sch, block, lanes)
    width = _block(sch, block)
    native = str(sch.get(block).annotations.get(DOT_PRODUCT_ATTR, "vdpbf16ps")) == "vdpbf16ps"
    epilogue = inline_epilogue(sch, block)
    for rounding in sch.get_producers(block):  # none when the input comes in bf16
        *outer_loops, _ = sch.get_loops(rounding)
        if outer_loops:
            sch.parallel(sch.fuse(*outer_loops))
        vectorize_innermost(sch, rounding, lanes)
    *lead, rows, columns, pairs, pair = sch.get_loops(block)
    rows_out, rows_in = sch.split(rows, [None, knobs.row_tile])
    columns_out, column_blocks, columns_in = sch.split(columns, [None, knobs.column_tile, width])
    sch.reorder(*lead, rows_out, columns_out, pairs, rows_in, column_blocks, columns_in, pair)
    outer = sch.fuse(*lead, rows_out, columns_out)
    sch.parallel(outer)
    write_back = accumulate_in_registers(sch, block, outer, [column_blocks, rows_in], None, pairs, lanes)
    sch.tensorize(columns_in, bf16_dot_product(width, native))
    store_tile(sch, write_back, epilogue, outer, lanes)
