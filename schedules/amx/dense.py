"""Dense layers on AMX tiles (`tvm_fuse.compute.dense_bf16` with `amx=True`): each parallel task
computes a block of `row_tiles * rows` rows x `column_tiles * 16` columns over the whole
reduction with one tile program (`tile_product`), stores it to a stack tile and applies the
fused epilogue to it in AVX-512. The product's kind follows the packed weight's dtype: bf16 bits
(uint16, [N/16, K/2, 16, 2]) run `tdpbf16ps`; s8 ([N/16, K/4, 16, 4], times a u8 input) runs
`tdpbusd`, so an int8 dense compute of the same loop nest (rows, columns, K/4, 4) tagged with
`DENSE_AMX_RULE` is scheduled here as it is.

The knobs are the tiles (`machine.Tiles`): rows per tile (a divisor of M, at most 16), row tiles and
column tiles, A + B + C tiles within the 8 tile registers.

The tile program (`tile_product`): each step is 64 bytes of K; A tiles are `rows` rows of the
activation at its row stride, B tiles 16 rows of 64 bytes: the packed weight [N/16, K/pack, 16,
pack] IS the B-tile layout, 64 / pack K values per row (a column block at its stride). One
program is the whole life of the tiles: load the configuration (in the calling thread: each
parallel task configures its own), zero the C tiles, step through K, store C to the caller's
stack tile, release the tiles."""

from __future__ import annotations

from tvm import s_tir, tirx
from tvm.s_tir import TensorIntrin
from tvm.script import tirx as T
from tvm.script.ir_builder import IRBuilder
from tvm.tirx.script.builder import ir as tb

from ...amx import AMX_ROW_BYTES as ROW_BYTES
from ..common import (
    accumulate_in_registers,
    compute_at_group,
    divisor,
    divisors,
    inline_epilogue,
    static_extent,
    store_tile,
    vectorize_innermost,
)
from .machine import (
    COLUMNS,
    INT8,
    MAX_ROWS,
    TILE_REGISTERS,
    TileKind,
    Tiles,
    emulated,
    kind_of,
    machine,
    registers,
    tensorize_tiles,
)


def tile_product(kind: TileKind, tiles: Tiles, k: int) -> str:
    """The registered name of the intrinsic for a C block of `tiles` over a reduction of `k`
    (a multiple of `kind.depth`), registering it on first use."""
    name = f"tvm_fuse.amx_{kind.name}_{tiles.row_tiles}x{tiles.rows}_{tiles.column_tiles}x{COLUMNS}_k{k}" \
        + ("_emulated" if emulated() else "")
    if TensorIntrin.get(name, allow_missing=True) is None:
        _register(name, kind, tiles, k)
    return name


def _register(name: str, kind: TileKind, tiles: Tiles, k: int) -> None:
    """`desc` is the update TVM matches (C += A B over all of K); the tile program zeroes its C
    tiles rather than loading C, so the block it replaces must span the whole reduction and
    have its init dropped (`tensorize_tiles`): then C = A B is exactly that block."""
    if not tiles.fits() or k % kind.depth:
        raise ValueError(f"{tiles} over K={k}: more than {TILE_REGISTERS} tiles, or K not a multiple of {kind.depth}")
    height, width, pack, words = tiles.rows * tiles.row_tiles, tiles.column_tiles * COLUMNS, kind.pack, k // kind.pack

    @T.prim_func(s_tir=True)
    def desc(a: T.handle, b: T.handle, c: T.handle) -> None:
        a_stride = T.int32()
        c_stride = T.int32()
        A = T.match_buffer(a, (height, k), kind.a, strides=[a_stride, 1], offset_factor=1)
        b_stride = T.int32()  # a column block's K: the whole weight's, of which this program takes `k`
        B = T.match_buffer(b, (tiles.column_tiles, words, COLUMNS, pack), kind.b,
                           strides=[b_stride, COLUMNS * pack, pack, 1], offset_factor=1)
        C = T.match_buffer(c, (height, width), kind.c, strides=[c_stride, 1], offset_factor=1, scope="local")
        with T.sblock("root"):
            T.reads(A[0:height, 0:k], B[0:tiles.column_tiles, 0:words, 0:COLUMNS, 0:pack])
            T.writes(C[0:height, 0:width])
            if height == 1:  # a unit row loop leaves no row iterator in the block TVM matches
                for j, kw, kp in T.grid(width, words, pack):
                    with T.sblock("update"):
                        vj, vkw, vkp = T.axis.remap("SRR", [j, kw, kp])
                        C[0, vj] = C[0, vj] + kind.product(A[0, vkw * pack + vkp],
                                                           B[vj // COLUMNS, vkw, vj % COLUMNS, vkp])
            else:
                for i, j, kw, kp in T.grid(height, width, words, pack):
                    with T.sblock("update"):
                        vi, vj, vkw, vkp = T.axis.remap("SSRR", [i, j, kw, kp])
                        C[vi, vj] = C[vi, vj] + kind.product(A[vi, vkw * pack + vkp],
                                                             B[vj // COLUMNS, vkw, vj % COLUMNS, vkp])

    TensorIntrin.register(name, desc, _impl(kind, tiles, k))


def _impl(kind: TileKind, tiles: Tiles, k: int) -> tirx.PrimFunc:
    """The tile program of `_register`'s description, built statement by statement (TVMScript
    has no Python-level loops, and every tile number must be an immediate), on the `machine`.
    Every tile row is 64 bytes: a B tile's rows are the 4-byte words of an A row."""
    height, width, pack, words = tiles.rows * tiles.row_tiles, tiles.column_tiles * COLUMNS, kind.pack, k // kind.pack
    tile = registers(tiles.row_tiles, tiles.column_tiles)
    shapes = tile.shapes((tiles.rows, ROW_BYTES, kind.c), (tiles.rows, ROW_BYTES, kind.a),
                         (ROW_BYTES // 4, ROW_BYTES, kind.b))

    with IRBuilder() as builder:
        with tb.prim_func(s_tir=True):
            tb.func_name("impl")
            handles = [tb.arg(n, tb.handle()) for n in ("a", "b", "c")]
            a_stride, b_stride, c_stride = tb.int32(), tb.int32(), tb.int32()
            A = tb.match_buffer(handles[0], (height, k), kind.a, strides=[a_stride, 1], offset_factor=1)
            B = tb.match_buffer(handles[1], (tiles.column_tiles, words, COLUMNS, pack), kind.b,
                                strides=[b_stride, COLUMNS * pack, pack, 1], offset_factor=1)
            C = tb.match_buffer(handles[2], (height, width), kind.c, strides=[c_stride, 1], offset_factor=1,
                                scope="local")
            with tb.sblock("root"):
                tb.reads(A[0:height, 0:k], B[0:tiles.column_tiles, 0:words, 0:COLUMNS, 0:pack])
                tb.writes(C[0:height, 0:width])
                with machine(shapes, [A, B, C]) as tiles_of:
                    for number in tile.c.values():
                        tiles_of.zero(number)
                    with tb.serial(0, k // kind.depth) as step:
                        for r, number in enumerate(tile.a):
                            tiles_of.load(number, A, r * tiles.rows * a_stride + step * kind.depth, a_stride)
                        for c, number in enumerate(tile.b):
                            tiles_of.load(number, B, c * b_stride + step * COLUMNS * COLUMNS * pack, COLUMNS * pack)
                        for (r, c), number in tile.c.items():
                            tiles_of.product(kind, number, tile.a[r], tile.b[c])
                    for (r, c), number in tile.c.items():
                        tiles_of.store(number, C, r * tiles.rows * c_stride + c * COLUMNS, c_stride)
    return builder.get()



# Most C tiles first: 2x2 loads 4 tiles per 4 products, 1x3 4 per 3, 1x2 3 per 2.
TILE_GRIDS = [(2, 2), (1, 3), (3, 1), (1, 2), (2, 1), (1, 1)]


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
    kind = kind_of(sch, block)
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
