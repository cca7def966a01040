"""NCHW{c}c convs on AMX tiles (`tvm_fuse.compute.conv_nchwc_int8` / `conv_nchwc_bf16` with
`amx=True`): each parallel task computes `row_tiles * rows` neighbouring output pixels of each
of `output_rows` rows x `column_tiles` C tiles (of 16 or 8 channels; two to an output block of 32) over the whole
reduction, `blocks` such C blocks along the output channels in turn, with one tile program
(`schedules.amx.conv_tile_product`, which loads the tile configuration once): per input channel
block and kernel tap, an A tile of the tap's input pixels (a row of the tile is one pixel's
channel block, read at the conv's stride) and a B tile of the tap's packed weights, which the
VNNI / BF16 packing already lays out as B tiles. The C block is stored to the stack, and the
fused epilogue (requantize, bias, residual) runs from there in AVX-512, as `schedules.dense_amx`
does. The tasks split the image's rows between the cores (and so does the pass that pads the
input), unless the weights are large (`common.splits_channels`): then the output channels.

The knobs are the tiles (`amx.ConvTiles`): pixels per tile (a divisor of the output width, at
most 16), row tiles, output rows and column tiles, C + B tiles and an A tile within the 8 tile
registers, and the C blocks per program; or, for a stride-1 conv, runs of tiles over whole output
rows (`ConvTiles.width`), which a 7x7 output takes in half the tiles. The compute rounds the
output up to whole tiles (`compute.amx_conv_output`): a 7x7 output takes 2 rows per C block."""

from __future__ import annotations

from dataclasses import replace

from tvm import s_tir

from .amx import (
    BF16,
    INT8,
    MAX_ROWS,
    ROW_BYTES,
    TILE_REGISTERS,
    ConvTiles,
    ConvWindow,
    TileKind,
    conv_tile_product,
    tensorize_tiles,
)
from .common import divisors, splits_channels, static_extent, store_tile
from .conv_nchwc_dot import inline_elementwise, input_pass


def _kind(sch: s_tir.Schedule, block) -> TileKind:
    return INT8 if str(sch.get(block).reads[1].source.dtype) == "int8" else BF16


def _extents(sch: s_tir.Schedule, block) -> tuple[int, int]:
    """(output width, C tiles along the output channels: its blocks' `ConvWindow.block_tiles` each)."""
    loops = sch.get_loops(block)
    return static_extent(sch.get(loops[3]).extent), \
        static_extent(sch.get(loops[1]).extent) * _window(sch, block).block_tiles


# A task's C blocks at most this many bytes: the stack block its epilogue reads stays in L1.
STACK_BYTES = 16 * 1024
PROGRAM_BLOCKS = (8, 4, 2, 1)  # C blocks per tile program, most first
MIN_TASKS = 32  # parallel tasks a kernel keeps where it can (a few per core)


# (A tiles, C tiles along the output channels) of a C block, the first that fits a conv's shape.
CONV_TILE_GRIDS = [(2, 2), (4, 1), (1, 3), (3, 1), (1, 2), (2, 1), (1, 1)]


def default_knobs(sch: s_tir.Schedule, block, lanes: int) -> ConvTiles:
    """The fewest tiles per output row: the tallest tile the width allows, or runs of tiles over
    whole rows (`ConvTiles.width`) where they take fewer (a 7x7 output: 16 pixels of 2 rows per
    tile, not 7 of one), in the first grid of `CONV_TILE_GRIDS` that the C blocks and output
    rows divide, its A tiles along a row where the row has room, else on the next rows; as many
    C blocks per program as the stack block and `MIN_TASKS` allow."""
    width, chunks = _extents(sch, block)
    height = _height(sch, block)
    rows = max(divisors(width, MAX_ROWS))
    runs = [run for run in _runs(sch, block) if run.row_tiles / run.output_rows < width // rows]
    fewest = min((run.row_tiles / run.output_rows for run in runs), default=0)
    whole = _window(sch, block).block_tiles
    grids = [(pixel_tiles, columns) for pixel_tiles, columns in CONV_TILE_GRIDS
             if chunks % columns == 0 and columns % whole == 0]
    tiles = next((replace(run, column_tiles=columns) for pixel_tiles, columns in grids for run in runs
                  if run.row_tiles == pixel_tiles and run.row_tiles / run.output_rows == fewest), None) or \
        next(ConvTiles(rows, row_tiles, columns, 1, pixel_tiles // row_tiles) for pixel_tiles, columns in grids
             for row_tiles in reversed(divisors(width // rows, pixel_tiles))
             if pixel_tiles % row_tiles == 0 and height % (pixel_tiles // row_tiles) == 0)
    tasks = _tasks(sch, block, tiles)
    return next(replace(tiles, blocks=blocks) for blocks in PROGRAM_BLOCKS
                if _fits(tiles, blocks, chunks) and tasks // blocks >= min(MIN_TASKS, tasks))


def knob_space(sch: s_tir.Schedule, block, lanes: int) -> list[ConvTiles]:
    width, chunks = _extents(sch, block)
    height = _height(sch, block)
    grids = [ConvTiles(r, rt, 1, 1, oy) for r in divisors(width, MAX_ROWS)
             for rt in divisors(width // r, TILE_REGISTERS) for oy in divisors(height, TILE_REGISTERS)
             if r * rt * oy > 1] + _runs(sch, block)
    whole = _window(sch, block).block_tiles
    return [tiles for grid in grids for ct in range(whole, TILE_REGISTERS, whole) for b in PROGRAM_BLOCKS
            if (tiles := replace(grid, column_tiles=ct, blocks=b)).fits() and _fits(tiles, b, chunks)]


def _height(sch: s_tir.Schedule, block) -> int:
    return static_extent(sch.get(sch.get_loops(block)[2]).extent)


def _runs(sch: s_tir.Schedule, block) -> list[ConvTiles]:
    """Runs of tiles over whole output rows (`ConvTiles.width`), one per C block height, each in
    its fewest tiles, one column tile: none for a strided conv."""
    width, _ = _extents(sch, block)
    window = _window(sch, block)
    runs = []
    for output_rows in divisors(_height(sch, block), TILE_REGISTERS):
        pixels = window.run(output_rows, width)
        if pixels:
            rows = max(divisors(pixels, MAX_ROWS))
            runs.append(ConvTiles(rows, pixels // rows, 1, 1, output_rows, width))
    return [run for run in runs if run.fits()]


def _fits(tiles: ConvTiles, blocks: int, chunks: int) -> bool:
    """Whether `blocks` C blocks of `tiles` divide the output's `chunks` C tiles and fit `STACK_BYTES`."""
    block_bytes = tiles.rows * tiles.pixel_tiles * tiles.column_tiles * ROW_BYTES
    return chunks % (tiles.column_tiles * blocks) == 0 and blocks * block_bytes <= STACK_BYTES


def _tasks(sch: s_tir.Schedule, block, tiles: ConvTiles) -> int:
    """The parallel tasks of one C block per program: batch x C blocks x output rows x row blocks."""
    n, _, y, x = (static_extent(sch.get(loop).extent) or 1 for loop in sch.get_loops(block)[:4])
    return n * _extents(sch, block)[1] // tiles.column_tiles * y // tiles.output_rows * x // tiles.row_pixels


def _window(sch: s_tir.Schedule, block) -> ConvWindow:
    """The conv's reduction, read off its block: loop extents, and the input index's steps."""
    *_, ic, ky, kx, group, member = (static_extent(sch.get(loop).extent) for loop in sch.get_loops(block))
    geometry = sch.get(block).annotations
    lane = static_extent(sch.get(sch.get_loops(block)[4]).extent)
    return ConvWindow(ic, group * member, ky, kx, int(geometry["stride"]), int(geometry["stride_h"]),
                      int(geometry["dilation_h"]), int(geometry["dilation_w"]), lane)


def schedule(sch: s_tir.Schedule, block, lanes: int, knobs: ConvTiles | None = None) -> None:
    knobs = knobs or default_knobs(sch, block, lanes)
    kind = _kind(sch, block)
    window = _window(sch, block)
    if knobs.width and knobs.width != _extents(sch, block)[0]:  # a run's rows are the input's whole rows
        raise ValueError(f"{knobs}: a run of tiles over rows of {knobs.width}, in a conv of another width")
    epilogue = inline_elementwise(sch, block)
    split_channels = splits_channels(sch, block)
    input_pass(sch, block, lanes, rows_first=not split_channels)  # the padded input, where tiles load it
    n, chunk, y, x, lane, ic, ky, kx, group, member = sch.get_loops(block)
    chunk_out, chunk_in = sch.split(chunk, [None, knobs.column_tiles * knobs.blocks // window.block_tiles])
    y_out, y_in = sch.split(y, [None, knobs.output_rows])
    x_out, x_in = sch.split(x, [None, knobs.row_pixels])
    tasks = [n, chunk_out, y_out, x_out] if split_channels else [n, y_out, x_out, chunk_out]
    sch.reorder(*tasks, chunk_in, y_in, x_in, lane, ic, ky, kx, group, member)
    outer = sch.fuse(*tasks)
    sch.parallel(outer)  # each task configures its own tiles: the program starts with ldtilecfg
    write_back = sch.cache_write(block, 0, "local")  # the C block on the stack, for the epilogue
    sch.reverse_compute_at(write_back, outer)
    tiles = tensorize_tiles(sch, chunk_in, conv_tile_product(kind, knobs, window))
    if knobs.width:  # C's rows as far apart as the input's, for the runs' tiles to store across them
        sch.storage_align(tiles, 0, 2, window.span(1, knobs.width)[1] * window.out_block, 0)
    store_tile(sch, write_back, epilogue, outer, lanes)
