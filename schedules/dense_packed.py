"""Dense layers with packed weights (`tvm_fuse.compute.matmul.dense_packed`): a tile of
`row_tile` rows x one block of output columns (a vector register per row) accumulated in
registers over the whole reduction, each step a broadcast input scalar times a contiguous
weight vector; tiles in parallel; the fused epilogue applied to the tile before it is stored."""

from __future__ import annotations

from dataclasses import dataclass

from tvm import s_tir

from .common import divisor, inline_epilogue, vectorize_innermost


@dataclass(frozen=True)
class DensePackedKnobs:
    row_tile: int  # rows accumulated together: row_tile vector registers


def default_knobs(sch: s_tir.Schedule, block, lanes: int) -> DensePackedKnobs:
    rows = sch.get(sch.get_loops(block)[-3]).extent
    return DensePackedKnobs(divisor(rows, [8, 6, 4, 2]))


def schedule(sch: s_tir.Schedule, block, lanes: int, knobs: DensePackedKnobs | None = None) -> None:
    knobs = knobs or default_knobs(sch, block, lanes)
    epilogue = inline_epilogue(sch, block)
    *lead, rows, columns, reduction = sch.get_loops(block)
    rows_out, rows_in = sch.split(rows, [None, knobs.row_tile])
    columns_out, columns_in = sch.split(columns, [None, lanes])
    sch.reorder(*lead, rows_out, columns_out, reduction, rows_in, columns_in)
    outer = sch.fuse(*lead, rows_out, columns_out)
    sch.parallel(outer)
    write_back = sch.cache_write(block, 0, "local")
    sch.reverse_compute_at(write_back, outer)
    sch.vectorize(columns_in)
    sch.unroll(rows_in)
    init = sch.decompose_reduction(block, reduction)
    vectorize_innermost(sch, init, lanes)
    if epilogue is not None:
        sch.compute_inline(write_back)
        sch.reverse_compute_at(epilogue, outer)
        vectorize_innermost(sch, epilogue, lanes)
    else:
        vectorize_innermost(sch, write_back, lanes)
