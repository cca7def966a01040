"""NCHW{c}c convs on AMX tiles (`tvm_fuse.compute.conv_nchwc_int8` / `conv_nchwc_bf16` with
`amx=True`): each parallel task computes `row_tiles * rows` neighbouring output pixels of each
of `output_rows` rows x `column_tiles` C tiles (of 16 or 8 channels; two to an output block of 32) over the whole
reduction, `blocks` such C blocks along the output channels in turn, with one tile program
(`conv_tile_product`, which loads the tile configuration once): per input channel
block and kernel tap, an A tile of the tap's input pixels (a row of the tile is one pixel's
channel block, read at the conv's stride) and a B tile of the tap's packed weights, which the
VNNI / BF16 packing already lays out as B tiles. The C block is stored to the stack, and the
fused epilogue (requantize, bias, residual) runs from there in AVX-512, as `dense`
does. The tasks split the image's rows between the cores (and so does the pass that pads the
input), unless the weights are large (`common.splits_channels`): then the output channels.

The knobs are the tiles (`ConvTiles`): pixels per tile (a divisor of the output width, at
most 16), row tiles, output rows and column tiles, C + B tiles and an A tile within the 8 tile
registers, and the C blocks per program; or, for a stride-1 conv, runs of tiles over whole output
rows (`ConvTiles.width`), which a 7x7 output takes in half the tiles. The compute rounds the
output up to whole tiles (`tvm_fuse.amx.amx_conv_output`): a 7x7 output takes 2 rows per C block."""

from __future__ import annotations

import math
from contextlib import contextmanager
from dataclasses import dataclass, replace

import tvm
from tvm import s_tir, tirx
from tvm.s_tir import TensorIntrin
from tvm.script.ir_builder import IRBuilder
from tvm.tirx.script.builder import ir as tb

from ...amx import AMX_ROW_BYTES as ROW_BYTES
from ...compute.conv import split_weight_index
from ..common import conv_tasks, divisors, parallel_tasks, splits_channels, static_extent, store_tile
from ..conv_nchwc_dot import inline_elementwise, input_pass
from .machine import (
    COLUMNS,
    MAX_ROWS,
    TILE_REGISTERS,
    TileKind,
    Tiles,
    element_bytes,
    emulated,
    kind_of,
    machine,
    registers,
    tensorize_tiles,
)


@dataclass(frozen=True)
class ConvTiles(Tiles):
    """A conv's tiles (`conv_tile_product`): a C block of `output_rows` output rows of
    `row_tiles` tiles each, by `column_tiles`; `blocks` such C blocks in turn, along the output
    channels, in one tile program. Each program loads the tile configuration once: on the AMX
    host, a second load (and release) in each of ResNet-50 bf16's programs added 9% to its
    kernels' time. The A tiles take turns in the registers the C and B tiles leave
    (`a_registers`), each loaded just before its products: a block of several output rows
    reuses each B tile (weights, which the 7x7 and 14x14 stages read from L2) for more pixels.

    `width` > 0: the C block is `output_rows` whole rows of `width` pixels, tiled as one run of
    `row_tiles` tiles of `rows` pixels along the input's rows in memory (a stride-1 conv): a 3x3
    conv's tile runs on past a row's end through the padding columns (their outputs computed
    and dropped) into the next row, so a 7x7 output's 2 rows take one tile of 16, not 2 of 7."""
    blocks: int = 1
    output_rows: int = 1
    width: int = 0

    @property
    def pixel_tiles(self) -> int:
        """A tiles per reduction step: one per `rows` output pixels of a row (or of the run)."""
        return self.row_tiles if self.width else self.output_rows * self.row_tiles

    @property
    def row_pixels(self) -> int:
        """The output pixels of each row of the C block."""
        return self.width or self.rows * self.row_tiles

    @property
    def a_registers(self) -> int:
        """Tile registers the A tiles take turns in: those C and B tiles leave, one per A tile at most."""
        return min(self.pixel_tiles, TILE_REGISTERS - (self.pixel_tiles + 1) * self.column_tiles)

    def fits(self) -> bool:
        return 1 <= self.rows <= MAX_ROWS and self.a_registers >= 1


@dataclass(frozen=True)
class ConvWindow:
    """The reduction of one output pixel of an NCHW{block}c conv: `chunks` input channel
    blocks of `block` channels, a `kernel_h` x `kernel_w` window at `dilation`, and the input
    steps between neighbouring output pixels of a row (`stride`) and of a column (`stride_h`);
    `out_block` output channels per output block: a C tile's columns (16, or 8 where the layout
    blocks channels by 8: MobileNetV2's 24), or two C tiles' (32: a bf16 build's wide blocks)."""
    chunks: int
    block: int
    kernel_h: int
    kernel_w: int
    stride: int
    stride_h: int
    dilation_h: int
    dilation_w: int
    out_block: int = COLUMNS

    @property
    def tile_columns(self) -> int:
        """Output channels per C tile: the output block's, at most a tile row's 16."""
        return min(self.out_block, COLUMNS)

    @property
    def block_tiles(self) -> int:
        """C tiles side by side in one output block."""
        return self.out_block // self.tile_columns

    def span(self, rows: int, pixels: int) -> tuple[int, int]:
        """(rows, columns) of the input that `rows` x `pixels` neighbouring outputs read."""
        columns = (pixels - 1) * self.stride + (self.kernel_w - 1) * self.dilation_w + 1
        return (rows - 1) * self.stride_h + (self.kernel_h - 1) * self.dilation_h + 1, columns

    def run(self, rows: int, width: int) -> int | None:
        """The pixels of a run of tiles over `rows` whole output rows of `width` (`ConvTiles.width`):
        from the first row's first pixel to the last row's last, rows as far apart as the input's
        (its window's columns). None for a strided conv, whose tile rows would not be one stride
        apart across a row's end."""
        if self.stride != 1 or self.stride_h != 1:
            return None
        return (rows - 1) * self.span(1, width)[1] + width


def conv_tile_product(kind: TileKind, tiles: ConvTiles, window: ConvWindow) -> str:
    """The registered name of the tile program for `tiles.blocks` of a conv's C blocks of
    `tiles` (rows: output pixels of a row; columns: output blocks), one after the
    other along the output channels, each over its whole `window`: one tile step per input
    channel block and kernel tap, the A tile that tap's input pixels (one channel block each,
    at the stride), the B tile the tap's packed weights, registering it on first use."""
    w = window
    name = (f"tvm_fuse.amx_conv_{kind.name}_{tiles.blocks}x{tiles.output_rows}x{tiles.row_tiles}x{tiles.rows}"
            f"_{tiles.column_tiles}x{w.out_block}_c{w.chunks}x{w.block}_k{w.kernel_h}x{w.kernel_w}"
            f"_s{w.stride_h}x{w.stride}_d{w.dilation_h}x{w.dilation_w}"
            + (f"_w{tiles.width}" if tiles.width else "") + ("_emulated" if emulated() else ""))
    if TensorIntrin.get(name, allow_missing=True) is None:
        row_bytes = window.block * element_bytes(kind.a)  # an A tile row: whole 4-byte words, at most 64 bytes
        if not tiles.fits() or row_bytes % 4 or row_bytes > ROW_BYTES:
            raise ValueError(f"{tiles} over {window}: more than {TILE_REGISTERS} tiles, or a channel block "
                             f"that is not a tile row")
        if tiles.column_tiles % window.block_tiles:
            raise ValueError(f"{tiles} over {window}: its column tiles are not whole output blocks")
        if tiles.width and window.run(tiles.output_rows, tiles.width) != tiles.rows * tiles.row_tiles:
            raise ValueError(f"{tiles} over {window}: its tiles are not one run over its rows")
        TensorIntrin.register(name, _conv_desc(kind, tiles, window), _conv_impl(kind, tiles, window))
    return name


def _conv_shapes(kind: TileKind, tiles: ConvTiles, window: ConvWindow) -> tuple:
    """The shapes of the conv program's operands: A the input window [chunks, rows, columns,
    block], B the weights of its C tiles [blocks x column_tiles, chunks, kh, kw, block / pack,
    tile_columns, pack] (`compute.conv.split_output_blocks`), C the output blocks' accumulators
    [blocks x column_tiles / block_tiles, output_rows, pixels, out_block]."""
    pixels, w, columns = tiles.row_pixels, window, tiles.blocks * tiles.column_tiles
    return ((w.chunks, *w.span(tiles.output_rows, pixels), w.block),
            (columns, w.chunks, w.kernel_h, w.kernel_w, w.block // kind.pack, w.tile_columns, kind.pack),
            (columns // w.block_tiles, tiles.output_rows, pixels, w.out_block))


def _conv_desc(kind: TileKind, tiles: ConvTiles, window: ConvWindow) -> tirx.PrimFunc:
    """C += the conv's sum, as `compute.conv_nchwc_int8` / `conv_nchwc_bf16` write it, in the
    loop order `schedule` leaves; a loop of one iteration (a 1x1 kernel's taps, one
    column tile) is a loop, but no iterator of the block TVM matches, so none here either."""
    w, pack = window, kind.pack
    extents = dict(oc=tiles.blocks * tiles.column_tiles // w.block_tiles, y=tiles.output_rows, x=tiles.row_pixels,
                   lane=w.out_block, ic=w.chunks, ky=w.kernel_h, kx=w.kernel_w, g=w.block // pack, p=pack)
    looped = [name for name, extent in extents.items() if extent > 1]

    with _conv_function("desc", kind, tiles, window) as ((A, B, C, _, _), made):
        with tb.grid(*extents.values()) as loops:
            with tb.sblock("update"):
                kinds = "".join("S" if name in ("oc", "y", "x", "lane") else "R" for name in looped)
                iterated = [loop for name, loop in zip(extents, loops) if name in looped]
                bound = tb.axis.remap(kinds, iterated)
                v = {name: tirx.const(0, "int32") for name in extents}
                v.update(zip(looped, list(bound) if len(looped) > 1 else [bound]))
                out = [v["oc"], v["y"], v["x"], v["lane"]]
                row = v["y"] * w.stride_h + v["ky"] * w.dilation_h
                pixel = A[v["ic"], row, v["x"] * w.stride + v["kx"] * w.dilation_w, v["g"] * pack + v["p"]]
                chunk, column = split_weight_index(v["oc"], v["lane"], w.tile_columns, w.out_block)
                weight = B[chunk, v["ic"], v["ky"], v["kx"], v["g"], column, v["p"]]
                tb.buffer_store(C, C[tuple(out)] + kind.product(pixel, weight), out)
    return made[0]


def _whole(buffer: tirx.Buffer) -> list:
    return [tirx.BufferRegion(buffer, [tvm.ir.Range(0, extent) for extent in buffer.shape])]


def _conv_impl(kind: TileKind, tiles: ConvTiles, window: ConvWindow) -> tirx.PrimFunc:
    """The tile program of `_conv_desc`, on the `machine`; the A tiles take turns in the
    registers the C and B tiles leave (`ConvTiles.a_registers`)."""
    w = window
    _, b_shape, _ = _conv_shapes(kind, tiles, window)
    tap_words = math.prod(b_shape[4:])  # B elements of one (block, tap): block / pack rows of 16 x pack
    tile = registers(tiles.pixel_tiles, tiles.column_tiles, tiles.a_registers)
    row_bytes = w.block * element_bytes(kind.a)
    column_bytes = w.tile_columns * 4  # a C row (fp32 / s32) and a B row (one 4-byte word per column)
    shapes = tile.shapes((tiles.rows, column_bytes, kind.c), (tiles.rows, row_bytes, kind.a),
                         (row_bytes // 4, column_bytes, kind.b))
    # Where each A tile's first pixel is in the input window and its C tile's in C, as (row, pixel):
    # a run's tiles are in the window's first row, the rows beyond reached through its row stride.
    placed = [(0, t * tiles.rows) if tiles.width else (t // tiles.row_tiles, t % tiles.row_tiles * tiles.rows)
              for t in range(tiles.pixel_tiles)]

    with _conv_function("impl", kind, tiles, window) as ((A, B, C, a_strides, c_strides), made):
        with machine(shapes, [A, B, C]) as tiles_of, tb.serial(0, tiles.blocks) as block:
            first = block * tiles.column_tiles  # this C block's first column tile

            def column(c):  # column tile c's output block, and its first channel there
                return (first + c) // w.block_tiles, (first + c) % w.block_tiles * w.tile_columns

            for number in tile.c.values():
                tiles_of.zero(number)
            with tb.grid(w.chunks, w.kernel_h, w.kernel_w) as (ic, ky, kx):
                tap = (ic * w.kernel_h + ky) * w.kernel_w + kx
                for c, number in enumerate(tile.b):
                    tiles_of.load(number, B, (((first + c) * w.chunks * w.kernel_h * w.kernel_w) + tap) * tap_words,
                                  w.tile_columns * kind.pack)
                for t, (y, x) in enumerate(placed):
                    a_tile = tile.a[t % len(tile.a)]
                    row = y * w.stride_h + ky * w.dilation_h
                    pixel = x * w.stride + kx * w.dilation_w
                    tiles_of.load(a_tile, A, ic * a_strides[0] + row * a_strides[1] + pixel * a_strides[2],
                                  w.stride * a_strides[2])
                    for c, b_tile in enumerate(tile.b):
                        tiles_of.product(kind, tile.c[t, c], a_tile, b_tile)
            for (t, c), number in tile.c.items():
                y, x = placed[t]
                out_block, channel = column(c)
                tiles_of.store(number, C, out_block * c_strides[0] + y * c_strides[1] + x * c_strides[2] + channel,
                               c_strides[2])
    return made[0]


@contextmanager
def _conv_function(name: str, kind: TileKind, tiles: ConvTiles, window: ConvWindow):
    """A conv tile function (`desc` or `impl`) being built: yields its operands A, B, C and the
    strides of A and C, within its root block, and a list that holds the function once built."""
    a_shape, b_shape, c_shape = _conv_shapes(kind, tiles, window)
    made = []
    with IRBuilder() as builder:
        with tb.prim_func(s_tir=True):
            tb.func_name(name)
            handles = [tb.arg(n, tb.handle()) for n in ("a", "b", "c")]
            a_strides, c_strides = [tb.int32() for _ in range(3)], [tb.int32() for _ in range(3)]
            A = tb.match_buffer(handles[0], a_shape, kind.a, strides=[*a_strides, 1], offset_factor=1)
            B = tb.match_buffer(handles[1], b_shape, kind.b, offset_factor=1)
            C = tb.match_buffer(handles[2], c_shape, kind.c, strides=[*c_strides, 1], offset_factor=1, scope="local")
            with tb.sblock("root"):
                tb.reads(*_whole(A), *_whole(B))
                tb.writes(*_whole(C))
                yield (A, B, C, a_strides, c_strides), made
    made.append(builder.get())



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
    kind = kind_of(sch, block)
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
    tasks = conv_tasks(split_channels, n, chunk_out, [y_out, x_out])
    sch.reorder(*tasks, chunk_in, y_in, x_in, lane, ic, ky, kx, group, member)
    outer = parallel_tasks(sch, tasks)  # each task configures its own tiles: the program starts with ldtilecfg
    write_back = sch.cache_write(block, 0, "local")  # the C block on the stack, for the epilogue
    sch.reverse_compute_at(write_back, outer)
    tiles = tensorize_tiles(sch, chunk_in, conv_tile_product(kind, knobs, window))
    if knobs.width:  # C's rows as far apart as the input's, for the runs' tiles to store across them
        sch.storage_align(tiles, 0, 2, window.span(1, knobs.width)[1] * window.out_block, 0)
    store_tile(sch, write_back, epilogue, outer, lanes)
