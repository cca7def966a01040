"""Matrix products (`tvm_fuse.compute.matmul.matmul`): a tile of rows x a few vectors of
columns accumulated in registers over the whole reduction, tiles in parallel, the fused
epilogue applied per tile."""

from __future__ import annotations

from dataclasses import dataclass

import tvm_ffi
from tvm import s_tir

from . import common


@dataclass(frozen=True)
class MatmulKnobs:
    column_vector: int  # output columns per vector
    row_tile: int  # output rows accumulated together
    column_tile: int = 1  # column vectors accumulated together


def default_knobs(sch: s_tir.Schedule, block, lanes: int) -> MatmulKnobs:
    *_, rows, columns, _ = (sch.get(loop).extent for loop in sch.get_loops(block))
    width = common.divisor(columns, [lanes >> s for s in range(lanes.bit_length())])
    row_tile = common.divisor(rows, [4, 2])
    return MatmulKnobs(width, row_tile, common.accumulator_tile(columns // width, row_tile, lanes))


def knob_space(sch: s_tir.Schedule, block, lanes: int) -> list[MatmulKnobs]:
    default = default_knobs(sch, block, lanes)
    *_, rows, columns, _ = (sch.get(loop).extent for loop in sch.get_loops(block))
    return [MatmulKnobs(default.column_vector, r, c)
            for r, c in common.row_column_tiles(rows, columns // default.column_vector, lanes)]


def schedule(sch: s_tir.Schedule, block, lanes: int, knobs: MatmulKnobs | None = None) -> None:
    knobs = knobs or default_knobs(sch, block, lanes)
    epilogue = common.inline_epilogue(sch, block)
    for padding in sch.get_producers(block):  # a symbolic column count's copy in whole vectors
        *outer_loops, _ = sch.get_loops(padding)
        if outer_loops:
            sch.parallel(sch.fuse(*outer_loops))
        common.vectorize_innermost(sch, padding, lanes)
    *lead, rows, columns, reduction = sch.get_loops(block)
    rows_out, rows_in = sch.split(rows, [None, knobs.row_tile])
    columns_out, column_vectors, columns_in = sch.split(columns, [None, knobs.column_tile, knobs.column_vector])
    sch.reorder(*lead, rows_out, columns_out, reduction, rows_in, column_vectors, columns_in)
    if epilogue is not None and _crops(sch, block, epilogue):
        # A padded product (symbolic dims): rows in parallel, each row of tiles in turn, the
        # tile in registers, the epilogue storing only its part inside the output.
        common.parallel_tasks(sch, [*lead, rows_out])
        vector = columns_in if knobs.column_vector > 1 else None
        write_back = common.accumulate_in_registers(sch, block, columns_out, [column_vectors, rows_in], vector,
                                                    reduction, lanes)
        common.store_tile(sch, write_back, epilogue, columns_out, lanes)
        return
    outer = sch.fuse(*lead, rows_out, columns_out)
    sch.parallel(outer)
    sch.unroll(rows_in)
    sch.unroll(column_vectors)
    vector = knobs.column_vector > 1  # a single column leaves nothing to vectorize
    if vector:
        sch.vectorize(columns_in)
    init = sch.decompose_reduction(block, reduction)
    if vector:
        common.vectorize_innermost(sch, init, lanes)
    if epilogue is not None:
        sch.reverse_compute_at(epilogue, outer)
        if vector:
            common.vectorize_innermost(sch, epilogue, lanes)


def _crops(sch: s_tir.Schedule, block, epilogue) -> bool:
    """Whether the epilogue stores less than the product computes (`compute.matmul.cropped`)."""
    computed, stored = (sch.get(b).writes[0].source.shape for b in (block, epilogue))
    return not tvm_ffi.structural_equal(computed, stored)
