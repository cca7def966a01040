"""Dense layers on AMX tiles (`tvm_fuse.compute.dense_bf16` with `amx=True`): each parallel task
computes a block of `row_tiles * rows` rows x `column_tiles * 16` columns over the whole
reduction with one tile program (`schedules.amx`), stores it to a stack tile and applies the
fused epilogue to it in AVX-512. The product's kind follows the packed weight's dtype: bf16 bits
(uint16, [N/16, K/2, 16, 2]) run `tdpbf16ps`; s8 ([N/16, K/4, 16, 4], times a u8 input) runs
`tdpbusd`, so an int8 dense compute of the same loop nest (rows, columns, K/4, 4) tagged with
`DENSE_AMX_RULE` is scheduled here as it is.

The knobs are the tiles (`amx.Tiles`): rows per tile (a divisor of M, at most 16), row tiles and
column tiles, A + B + C tiles within the 8 tile registers."""

from __future__ import annotations

from tvm import s_tir

from .amx import BF16, COLUMNS, INT8, MAX_ROWS, TileKind, Tiles, tensorize_tiles, tile_product
from .common import (
    accumulate_in_registers,
    compute_at_group,
    divisor,
    divisors,
    inline_epilogue,
    static_extent,
    store_tile,
    vectorize_innermost,
)

# Most C tiles first: 2x2 loads 4 tiles per 4 products, 1x3 4 per 3, 1x2 3 per 2.
TILE_GRIDS = [(2, 2), (1, 3), (3, 1), (1, 2), (2, 1), (1, 1)]


def _kind(sch: s_tir.Schedule, block) -> TileKind:
    return INT8 if str(sch.get(block).reads[1].source.dtype) == "int8" else BF16


def _extents(sch: s_tir.Schedule, block, reductions: int = 2) -> tuple[int, int]:
    """(rows, column tiles) of the product: M (0 if symbolic) and N / 16; its loops end in
    rows, columns and `reductions` (K in words and packs; a grouped product's groups)."""
    *_, rows, columns = (sch.get(loop).extent for loop in sch.get_loops(block)[:-reductions])
    return static_extent(rows), int(columns) // COLUMNS


def default_knobs(sch: s_tir.Schedule, block, lanes: int) -> Tiles:
    return _default_tiles(*_extents(sch, block))


def knob_space(sch: s_tir.Schedule, block, lanes: int) -> list[Tiles]:
    return _tile_space(*_extents(sch, block))


def _default_tiles(rows: int, column_tiles: int) -> Tiles:
    """The tallest tile M allows, in the grid of the most C tiles M and N divide."""
    tile_rows = divisor(rows, range(MAX_ROWS, 0, -1))
    row_tiles = rows // tile_rows if rows else 1
    grid = next(g for g in TILE_GRIDS if row_tiles % g[0] == 0 and column_tiles % g[1] == 0)
    return Tiles(tile_rows, *grid)


def _tile_space(rows: int, column_tiles: int) -> list[Tiles]:
    """Every tile shape M and N divide within the tile registers."""
    return [Tiles(r, rt, ct) for r in divisors(rows, MAX_ROWS) for rt, ct in TILE_GRIDS
            if (rows // r if rows else 1) % rt == 0 and column_tiles % ct == 0]


def schedule(sch: s_tir.Schedule, block, lanes: int, knobs: Tiles | None = None) -> None:
    knobs = knobs or default_knobs(sch, block, lanes)
    if not knobs.fits():
        raise ValueError(f"{knobs} needs more than the 8 tile registers")
    kind = _kind(sch, block)
    epilogue = inline_epilogue(sch, block)
    for producer in sch.get_producers(block):  # an fp32 input's rounding to bf16, if any
        *outer_loops, _ = sch.get_loops(producer)
        if outer_loops:
            sch.parallel(sch.fuse(*outer_loops))
        vectorize_innermost(sch, producer, lanes)
    *lead, rows, columns, words, pack = sch.get_loops(block)
    depth = int(sch.get(words).extent) * int(sch.get(pack).extent)
    rows_out, rows_in = sch.split(rows, [None, knobs.rows * knobs.row_tiles])
    columns_out, columns_in = sch.split(columns, [None, knobs.column_tiles * COLUMNS])
    sch.reorder(*lead, rows_out, columns_out, rows_in, columns_in, words, pack)
    outer = sch.fuse(*lead, rows_out, columns_out)
    sch.parallel(outer)  # each task configures its own tiles: the program starts with ldtilecfg
    write_back = sch.cache_write(block, 0, "local")  # the C block on the stack, for the epilogue
    sch.reverse_compute_at(write_back, outer)
    # A block of one row has no row loop for the tile program to take (`amx` describes it so).
    tensorize_tiles(sch, rows_in if knobs.rows * knobs.row_tiles > 1 else columns_in, tile_product(kind, knobs, depth))
    store_tile(sch, write_back, epilogue, outer, lanes)


def default_group_knobs(sch: s_tir.Schedule, block, lanes: int) -> Tiles:
    return _default_tiles(*_extents(sch, block, reductions=1))


def group_knob_space(sch: s_tir.Schedule, block, lanes: int) -> list[Tiles]:
    return _tile_space(*_extents(sch, block, reductions=1))


def schedule_groups(sch: s_tir.Schedule, block, lanes: int, knobs: Tiles | None = None) -> None:
    """Rows quantized in groups (`dense_int8_groups(amx=True)`): for each group of 64 bytes of K,
    one tile program computes the task's C block of s32 sums into a stack tile, which AVX-512
    scales into the task's fp32 block (`scale * sum + low * column_sum`); the epilogue follows."""
    knobs = knobs or default_group_knobs(sch, block, lanes)
    if not knobs.fits():
        raise ValueError(f"{knobs} needs more than the 8 tile registers")
    (sums,) = sch.get_producers(block)
    epilogue = inline_epilogue(sch, block)
    *lead, rows, columns, groups = sch.get_loops(block)
    rows_out, rows_in = sch.split(rows, [None, knobs.rows * knobs.row_tiles])
    columns_out, column_vectors, column_lanes = sch.split(columns, [None, knobs.column_tiles, COLUMNS])
    sch.reorder(*lead, rows_out, columns_out, groups, rows_in, column_vectors, column_lanes)
    outer = sch.fuse(*lead, rows_out, columns_out)
    sch.parallel(outer)  # each task configures its own tiles: every program starts with ldtilecfg
    write_back = accumulate_in_registers(sch, block, outer, [], column_lanes, groups, lanes)
    under_group = compute_at_group(sch, sums, groups)
    tensorize_tiles(sch, under_group[0], tile_product(INT8, knobs, _group_depth(sch, sums)))
    store_tile(sch, write_back, epilogue, outer, lanes)


def _group_depth(sch: s_tir.Schedule, sums) -> int:
    """K values per group: the group sum's reduction."""
    *_, words, pack = sch.get_loops(sums)
    return int(sch.get(words).extent) * int(sch.get(pack).extent)
