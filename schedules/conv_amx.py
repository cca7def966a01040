"""NCHW{c}c convs on AMX tiles (`tvm_fuse.compute.conv_nchwc_int8` / `conv_nchwc_bf16` with
`amx=True`): each parallel task computes `row_tiles * rows` neighbouring output pixels of a row
x `column_tiles` output blocks of 16 channels over the whole reduction, `blocks` such C blocks
along the output channels in turn, with one tile program (`schedules.amx.conv_tile_product`,
which loads the tile configuration once): per input channel block and kernel tap, an A tile of the
tap's input pixels (a row of the tile is one pixel's channel block, read at the conv's stride)
and a B tile of the tap's packed weights, which the VNNI / BF16 packing already lays out as B
tiles. The C block is stored to the stack, and the fused epilogue (requantize, bias, residual)
runs from there in AVX-512, as `schedules.dense_amx` does.

The knobs are the tiles (`amx.ConvTiles`): pixels per tile (a divisor of the output width, at
most 16), row tiles and column tiles, A + B + C tiles within the 8 tile registers, and the C
blocks per program."""

from __future__ import annotations

from tvm import s_tir

from .amx import (BF16, INT8, MAX_ROWS, ROW_BYTES, ConvTiles, ConvWindow, TileKind, conv_tile_product,
                  tensorize_tiles)
from .common import divisors, static_extent, store_tile
from .conv_nchwc_dot import inline_elementwise, input_pass
from .dense_amx import TILE_GRIDS


def _kind(sch: s_tir.Schedule, block) -> TileKind:
    return INT8 if str(sch.get(block).reads[1].source.dtype) == "int8" else BF16


def _extents(sch: s_tir.Schedule, block) -> tuple[int, int]:
    """(output width, output channel blocks)."""
    loops = sch.get_loops(block)
    return static_extent(sch.get(loops[3]).extent), static_extent(sch.get(loops[1]).extent)


# A task's C blocks at most this many bytes: the stack block its epilogue reads stays in L1.
STACK_BYTES = 16 * 1024
PROGRAM_BLOCKS = (8, 4, 2, 1)  # C blocks per tile program, most first
MIN_TASKS = 32  # parallel tasks a kernel keeps where it can (a few per core)


def default_knobs(sch: s_tir.Schedule, block, lanes: int) -> ConvTiles:
    """The tallest tile the width allows, in the grid of the most C tiles width and blocks
    divide; as many C blocks per program as the stack block and `MIN_TASKS` allow."""
    width, chunks = _extents(sch, block)
    rows = max(divisors(width, MAX_ROWS))
    grid = next(g for g in TILE_GRIDS if (width // rows) % g[0] == 0 and chunks % g[1] == 0)
    tiles = ConvTiles(rows, *grid)
    tasks = _tasks(sch, block, tiles)
    return next(ConvTiles(rows, *grid, blocks) for blocks in PROGRAM_BLOCKS
                if _fits(tiles, blocks, chunks) and tasks // blocks >= min(MIN_TASKS, tasks))


def knob_space(sch: s_tir.Schedule, block, lanes: int) -> list[ConvTiles]:
    width, chunks = _extents(sch, block)
    return [ConvTiles(r, rt, ct, b) for r in divisors(width, MAX_ROWS) for rt, ct in TILE_GRIDS for b in PROGRAM_BLOCKS
            if (width // r) % rt == 0 and r * rt > 1 and _fits(ConvTiles(r, rt, ct), b, chunks)]


def _fits(tiles: ConvTiles, blocks: int, chunks: int) -> bool:
    """Whether `blocks` C blocks of `tiles` divide the output blocks and fit `STACK_BYTES`."""
    block_bytes = tiles.rows * tiles.row_tiles * tiles.column_tiles * ROW_BYTES
    return chunks % (tiles.column_tiles * blocks) == 0 and blocks * block_bytes <= STACK_BYTES


def _tasks(sch: s_tir.Schedule, block, tiles: ConvTiles) -> int:
    """The parallel tasks of one C block per program: batch x C blocks x output rows x row blocks."""
    n, chunk, y, x = (static_extent(sch.get(loop).extent) or 1 for loop in sch.get_loops(block)[:4])
    return n * chunk // tiles.column_tiles * y * x // (tiles.rows * tiles.row_tiles)


def _window(sch: s_tir.Schedule, block) -> ConvWindow:
    """The conv's reduction, read off its block: loop extents, and the input index's steps."""
    *_, ic, ky, kx, group, member = (static_extent(sch.get(loop).extent) for loop in sch.get_loops(block))
    geometry = sch.get(block).annotations
    return ConvWindow(ic, group * member, ky, kx, int(geometry["stride"]), int(geometry["dilation_h"]),
                      int(geometry["dilation_w"]))


def schedule(sch: s_tir.Schedule, block, lanes: int, knobs: ConvTiles | None = None) -> None:
    knobs = knobs or default_knobs(sch, block, lanes)
    kind = _kind(sch, block)
    window = _window(sch, block)
    epilogue = inline_elementwise(sch, block)
    input_pass(sch, block, lanes)  # the padded input in memory, where tiles load it
    n, chunk, y, x, lane, ic, ky, kx, group, member = sch.get_loops(block)
    chunk_out, chunk_in = sch.split(chunk, [None, knobs.column_tiles * knobs.blocks])
    x_out, x_in = sch.split(x, [None, knobs.rows * knobs.row_tiles])
    sch.reorder(n, chunk_out, y, x_out, chunk_in, x_in, lane, ic, ky, kx, group, member)
    outer = sch.fuse(n, chunk_out, y, x_out)
    sch.parallel(outer)  # each task configures its own tiles: the program starts with ldtilecfg
    write_back = sch.cache_write(block, 0, "local")  # the C block on the stack, for the epilogue
    sch.reverse_compute_at(write_back, outer)
    tensorize_tiles(sch, chunk_in, conv_tile_product(kind, knobs, window))
    store_tile(sch, write_back, epilogue, outer, lanes)
