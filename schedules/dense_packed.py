"""Dense layers with packed weights (`tvm_fuse.compute.matmul.dense_packed`): a tile of
`row_tile` rows x `column_tile` blocks of output columns (a vector register each) accumulated
in registers over the whole reduction, each step a broadcast input scalar times contiguous
weight vectors; tiles in parallel, a strip of columns at a time; the fused epilogue applied
to the tile before it is stored. A vector is one block of the packed weight: the target's width, or narrower for s8 weights
packed in the widest block that divides their columns (8 for 1000 classes)."""

from __future__ import annotations

from dataclasses import dataclass

from tvm import s_tir

from ..ir_names import PREFETCH_ATTR
from .common import (
    accumulate_in_registers,
    accumulator_tile,
    divisor,
    inline_epilogue,
    row_column_tiles,
    static_extent,
    store_tile,
)

DENSE_ACCUMULATORS = 24  # a dense tile's accumulator vectors at most, where the ISA has 32 registers
CHUNK_INPUT_BYTES = 1 << 20  # a dense layer's input beyond this is taken a chunk of rows at a time


@dataclass(frozen=True)
class DensePackedKnobs:
    row_tile: int  # rows accumulated together
    column_tile: int = 1  # blocks of output columns accumulated together


def _vector(sch: s_tir.Schedule, block, lanes: int) -> int:
    """Columns per vector: the packed weight's block (the block's second read), at most `lanes`."""
    return min(lanes, int(sch.get(block).reads[1].source.shape[-1]))


def default_knobs(sch: s_tir.Schedule, block, lanes: int) -> DensePackedKnobs:
    *_, rows, columns, _ = (sch.get(loop).extent for loop in sch.get_loops(block))
    return default_tile(rows, columns // _vector(sch, block, lanes), lanes)


def knob_space(sch: s_tir.Schedule, block, lanes: int) -> list[DensePackedKnobs]:
    *_, rows, columns, _ = (sch.get(loop).extent for loop in sch.get_loops(block))
    return tile_space(rows, columns // _vector(sch, block, lanes), lanes)


def default_tile(rows, vectors, lanes: int) -> DensePackedKnobs:
    """The tile for `rows` rows and `vectors` accumulator vectors of output columns: the most
    rows up to 8 that divide them. A tile of one or two rows reads each weight vector for one
    or two FMAs, more than L2 delivers: ConvNeXt's 7x7-token dense layers ran 2.3x slower in
    tiles of one row than of seven (Zen 4). Up to 24 accumulators on AVX-512 (8 rows x 3
    vectors): per step 11 loads feed 24 FMAs, against 10 for 16 in tiles of 8 x 2; MiniLM's
    dense layers, 8 x 3 against 8 x 2 in the model, took 1-3.5% less time (Intel with AMX)."""
    row_tile = divisor(rows, range(8, 1, -1))
    return DensePackedKnobs(row_tile, accumulator_tile(vectors, row_tile, lanes, DENSE_ACCUMULATORS))


def row_chunk(row_dims, depth, row_tile: int) -> int | None:
    """Rows per chunk where a dense layer's fp32 input (`row_dims` x `depth`, static) is more
    than `CHUNK_INPUT_BYTES`: the most whole row tiles dividing the rows whose input is within
    it. Every strip of columns reads the whole input; larger than L2, it came from L3 for each
    strip: MiniLM's dense layers took 6-7.5% less time at batch 8 (1024 rows, chunks of 128 or
    256) and 7.6% at 384 tokens (Intel with AMX). None: one chunk, all rows (or a symbolic count)."""
    rows, depth = _static_product(row_dims), static_extent(depth)
    if not rows or not depth or rows * depth * 4 <= CHUNK_INPUT_BYTES:
        return None
    fitting = [c for c in range(row_tile, rows, row_tile) if rows % c == 0 and c * depth * 4 <= CHUNK_INPUT_BYTES]
    return max(fitting, default=None)


def tile_space(rows, vectors, lanes: int) -> list[DensePackedKnobs]:
    """Every tile within the accumulator budget the extents divide."""
    return [DensePackedKnobs(r, c) for r, c in row_column_tiles(rows, vectors, lanes)]


def schedule(sch: s_tir.Schedule, block, lanes: int, knobs: DensePackedKnobs | None = None) -> None:
    knobs = knobs or default_knobs(sch, block, lanes)
    lanes = _vector(sch, block, lanes)
    epilogue = inline_epilogue(sch, block)
    *lead, rows, columns, reduction = sch.get_loops(block)
    chunk = row_chunk([sch.get(loop).extent for loop in (*lead, rows)], sch.get(reduction).extent,
                      knobs.row_tile)
    rows_out, rows_in = sch.split(rows, [None, knobs.row_tile])
    columns_out, column_blocks, columns_in = sch.split(columns, [None, knobs.column_tile, lanes])
    # Each broadcast input feeds column_tile FMAs, each weight vector row_tile FMAs. Tiles of
    # one strip of columns run one after another, so the strip's weights (K x a few vectors:
    # 48 KB for MiniLM) stay in L2 for every row; row-major tiles read the whole weight from
    # L3 once per row tile (MiniLM's 2.4 MB FFN weights): its dense layers 7-10% slower (Zen 5).
    if chunk:  # the strips in turn over a chunk of rows, whose input stays in L2, chunk by chunk
        chunks, rows_out = sch.split(sch.fuse(*lead, rows_out) if lead else rows_out, [None, chunk // knobs.row_tile])
        sch.reorder(chunks, columns_out, rows_out, reduction, rows_in, column_blocks, columns_in)
        strips, tiles = [chunks, columns_out], [rows_out]
    else:
        sch.reorder(columns_out, *lead, rows_out, reduction, rows_in, column_blocks, columns_in)
        strips, tiles = [columns_out], [*lead, rows_out]
    strip_count, strip_tiles = (_static_product(sch.get(loop).extent for loop in loops) for loops in (strips, tiles))
    outer = sch.fuse(*strips, *tiles)
    sch.parallel(outer)
    write_back = accumulate_in_registers(sch, block, outer, [column_blocks, rows_in], columns_in, reduction, lanes)
    store_tile(sch, write_back, epilogue, outer, lanes)
    depth = static_extent(sch.get(reduction).extent)
    if strip_count and strip_tiles != 1 and depth:  # a strip of one tile has no others to share it with
        sch.annotate(reduction, PREFETCH_ATTR, [strip_count, knobs.column_tile * lanes * depth])


def _static_product(extents) -> int:
    """The product of `extents`, 0 if one is symbolic."""
    product = 1
    for extent in extents:
        product *= static_extent(extent)
    return product
