"""AMX tile intrinsics: a block of C, `row_tiles * rows` x `column_tiles * 16`, summed over the
whole reduction K (or one group of it, `dense_amx.schedule_groups`) on the matrix engine
(Intel AMX: `tdpbf16ps` for bf16, `tdpbusd` for u8 x s8).

One intrinsic call is the whole life of the tiles: load the tile configuration (in the calling
thread: each parallel task configures its own), zero the C tiles, then for each step of K load
`row_tiles` A tiles and `column_tiles` B tiles and multiply every A tile with every B tile into
its C tile; finally store C to the caller's buffer (a small stack tile the fused epilogue reads
in AVX-512) and release the tiles. At most 8 tile registers: A + B + C tiles <= 8.
- A dense (`tile_product`): each step is 64 bytes of K; A tiles are `rows` rows of the
  activation at its row stride, B tiles 16 rows of 64 bytes: the packed weight [N/16, K/pack,
  16, pack] IS the B-tile layout, 64 / pack K values per row (a column block at its stride).
- A conv in NCHW{c}c (`conv_tile_product`): each step is one input channel block at one kernel
  tap; A tiles are neighbouring output pixels' input (a row per pixel: its c channels, c x
  bytes of at most 64, at the conv's stride), B tiles the tap's weights as VNNI / bf16 pair
  packing lays them out (c / pack rows of 16 x pack).

TVM 0.27 emits AMX through LLVM's x86 intrinsics on tile numbers (immediates); they compile
for any target with amx-tile (`-mcpu=sapphirerapids`) and run only where the OS permits
(`tvm_fuse.amx`). Shapes differ per layer and the intrinsic covers all of the reduction, so
each (kind, tiles, shape) is registered on first use. Every program is built once for the
hardware and once, for tests on any host, on emulated tile registers (`emulated_tiles`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

import tvm
from tvm import s_tir, tirx
from tvm.s_tir import SBlock, TensorIntrin
from tvm.script import tirx as T
from tvm.script.ir_builder import IRBuilder
from tvm.tirx.script.builder import ir as tb

from ..compute import AMX_COLUMNS as COLUMNS  # C columns per tile: a row of 64 bytes of fp32 / s32
from ..compute import AMX_ROW_BYTES as ROW_BYTES  # bytes per tile row
from ..compute import AMX_ROWS as MAX_ROWS  # rows per tile
from ..compute.bf16 import from_bits
from ..compute.conv import split_weight_index

TILE_REGISTERS = 8


@dataclass(frozen=True)
class TileKind:
    """One AMX product: A (M x K) times B (packed [N/16, K/pack, 16, pack]) into C (M x N)."""
    name: str
    a: str  # A's dtype (bf16 as its uint16 bits, `compute.bf16`)
    b: str
    c: str
    pack: int  # K values per 32-bit word of B: one 4-byte column of a B tile row
    instruction: str  # LLVM intrinsic: tdp*(c tile, a tile, b tile)
    product: Callable[[tirx.PrimExpr, tirx.PrimExpr], tirx.PrimExpr]  # a term of C's sum, as the compute writes it

    @property
    def depth(self) -> int:
        """K values per tile step: a 64-byte row of A, 16 pack-words of B."""
        return COLUMNS * self.pack


BF16 = TileKind("bf16", "uint16", "uint16", "float32", 2, "llvm.x86.tdpbf16ps",
                lambda a, b: from_bits(a) * from_bits(b))
INT8 = TileKind("int8", "uint8", "int8", "int32", 4, "llvm.x86.tdpbusd",
                lambda a, b: a.astype("int32") * b.astype("int32"))


@dataclass(frozen=True)
class Tiles:
    """A block of C in tiles: `row_tiles` x `column_tiles` C tiles of `rows` x 16."""
    rows: int  # rows per tile, at most 16
    row_tiles: int = 1
    column_tiles: int = 1

    def fits(self) -> bool:
        """Within the tile registers: one per A tile, B tile and C tile."""
        registers = self.row_tiles * self.column_tiles + self.row_tiles + self.column_tiles
        return 1 <= self.rows <= MAX_ROWS and registers <= TILE_REGISTERS


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


def tile_product(kind: TileKind, tiles: Tiles, k: int) -> str:
    """The registered name of the intrinsic for a C block of `tiles` over a reduction of `k`
    (a multiple of `kind.depth`), registering it on first use."""
    emulated = _EMULATED.get()
    name = f"tvm_fuse.amx_{kind.name}_{tiles.row_tiles}x{tiles.rows}_{tiles.column_tiles}x{COLUMNS}_k{k}" \
        + ("_emulated" if emulated else "")
    if TensorIntrin.get(name, allow_missing=True) is None:
        _register(name, kind, tiles, k, emulated)
    return name


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
    emulated = _EMULATED.get()
    w = window
    name = (f"tvm_fuse.amx_conv_{kind.name}_{tiles.blocks}x{tiles.output_rows}x{tiles.row_tiles}x{tiles.rows}"
            f"_{tiles.column_tiles}x{w.out_block}_c{w.chunks}x{w.block}_k{w.kernel_h}x{w.kernel_w}"
            f"_s{w.stride_h}x{w.stride}_d{w.dilation_h}x{w.dilation_w}"
            + (f"_w{tiles.width}" if tiles.width else "") + ("_emulated" if emulated else ""))
    if TensorIntrin.get(name, allow_missing=True) is None:
        row_bytes = window.block * _size(kind.a)  # an A tile row: whole 4-byte words, at most 64 bytes
        if not tiles.fits() or row_bytes % 4 or row_bytes > ROW_BYTES:
            raise ValueError(f"{tiles} over {window}: more than {TILE_REGISTERS} tiles, or a channel block "
                             f"that is not a tile row")
        if tiles.column_tiles % window.block_tiles:
            raise ValueError(f"{tiles} over {window}: its column tiles are not whole output blocks")
        if tiles.width and window.run(tiles.output_rows, tiles.width) != tiles.rows * tiles.row_tiles:
            raise ValueError(f"{tiles} over {window}: its tiles are not one run over its rows")
        TensorIntrin.register(name, _conv_desc(kind, tiles, window), _conv_impl(kind, tiles, window, emulated))
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
    loop order `schedules.conv_amx` leaves; a loop of one iteration (a 1x1 kernel's taps, one
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


def _conv_impl(kind: TileKind, tiles: ConvTiles, window: ConvWindow, emulated: bool) -> tirx.PrimFunc:
    w = window
    _, b_shape, _ = _conv_shapes(kind, tiles, window)
    tap_words = math.prod(b_shape[4:])  # B elements of one (block, tap): block / pack rows of 16 x pack
    c_count, b_count = tiles.pixel_tiles * tiles.column_tiles, tiles.column_tiles
    c_tiles = {(t, c): t * tiles.column_tiles + c for t in range(tiles.pixel_tiles) for c in range(b_count)}
    b_tiles = [c_count + c for c in range(b_count)]
    a_tiles = [c_count + b_count + a for a in range(tiles.a_registers)]
    row_bytes = w.block * _size(kind.a)
    column_bytes = w.tile_columns * 4  # a C row (fp32 / s32) and a B row (one 4-byte word per column)
    shapes = [(tiles.rows, column_bytes, kind.c)] * c_count + [(row_bytes // 4, column_bytes, kind.b)] * b_count \
        + [(tiles.rows, row_bytes, kind.a)] * len(a_tiles)
    # Where each A tile's first pixel is in the input window and its C tile's in C, as (row, pixel):
    # a run's tiles are in the window's first row, the rows beyond reached through its row stride.
    placed = [(0, t * tiles.rows) if tiles.width else (t // tiles.row_tiles, t % tiles.row_tiles * tiles.rows)
              for t in range(tiles.pixel_tiles)]

    with _conv_function("impl", kind, tiles, window) as ((A, B, C, a_strides, c_strides), made):
        with (_EmulatedTiles if emulated else _HardwareTiles)(shapes, [A, B, C]) as machine, \
                tb.serial(0, tiles.blocks) as block:
            first = block * tiles.column_tiles  # this C block's first column tile

            def column(c):  # column tile c's output block, and its first channel there
                return (first + c) // w.block_tiles, (first + c) % w.block_tiles * w.tile_columns

            for tile in c_tiles.values():
                machine.zero(tile)
            with tb.grid(w.chunks, w.kernel_h, w.kernel_w) as (ic, ky, kx):
                tap = (ic * w.kernel_h + ky) * w.kernel_w + kx
                for c, tile in enumerate(b_tiles):
                    machine.load(tile, B, (((first + c) * w.chunks * w.kernel_h * w.kernel_w) + tap) * tap_words,
                                 w.tile_columns * kind.pack)
                for t, (y, x) in enumerate(placed):
                    a_tile = a_tiles[t % len(a_tiles)]
                    row = y * w.stride_h + ky * w.dilation_h
                    pixel = x * w.stride + kx * w.dilation_w
                    machine.load(a_tile, A, ic * a_strides[0] + row * a_strides[1] + pixel * a_strides[2],
                                 w.stride * a_strides[2])
                    for c, b_tile in enumerate(b_tiles):
                        machine.product(kind, c_tiles[t, c], a_tile, b_tile)
            for (t, c), tile in c_tiles.items():
                y, x = placed[t]
                out_block, channel = column(c)
                machine.store(tile, C, out_block * c_strides[0] + y * c_strides[1] + x * c_strides[2] + channel,
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


@contextmanager
def emulated_tiles():
    """Within this block, tile programs are scheduled as their emulation (`_EmulatedTiles`):
    plain loops with no tile instruction, which run on any host. For tests of the programs."""
    token = _EMULATED.set(True)
    try:
        yield
    finally:
        _EMULATED.reset(token)


_EMULATED = ContextVar("tvm_fuse.emulated_tiles", default=False)


def tensorize_tiles(sch: s_tir.Schedule, loop, intrinsic: str):
    """Compute the block under `loop` (a C block over the whole reduction) with the tile
    program `intrinsic` (`tile_product`, `conv_tile_product`), and drop the block's init: the
    program's tilezero is C's init, and the zeroing loop TVM keeps (a memset of the whole C
    block per task) would only be overwritten. Returns the tile program's block."""
    block = sch.blockize(loop)
    if any(int(v.dom.extent) != 1 for v in sch.get(block).iter_vars if v.iter_type == tirx.IterVar.CommReduce):
        raise ValueError(f"an AMX block must span the whole reduction ({intrinsic})")
    sch.tensorize(block, intrinsic)
    old = sch.get(block)
    new = SBlock(old.iter_vars, old.reads, old.writes, old.name_hint, old.body, None,
                 old.alloc_buffers, old.match_buffers, old.annotations)
    sch.state.replace(sch.get_sref(block), new, {old: new})
    return block


def _register(name: str, kind: TileKind, tiles: Tiles, k: int, emulated: bool) -> None:
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

    TensorIntrin.register(name, desc, _impl(kind, tiles, k, emulated))


def _shapes(kind: TileKind, tiles: Tiles, a_row_bytes: int) -> list[tuple[int, int, str]]:
    """(rows, bytes per row, element type) of each tile register: C tiles, A tiles, B tiles
    (whose rows are the 4-byte words of an A row)."""
    return [(tiles.rows, ROW_BYTES, kind.c)] * (tiles.row_tiles * tiles.column_tiles) \
        + [(tiles.rows, a_row_bytes, kind.a)] * tiles.row_tiles \
        + [(a_row_bytes // 4, ROW_BYTES, kind.b)] * tiles.column_tiles


def _tile_numbers(tiles: Tiles) -> tuple[dict[tuple[int, int], int], list[int], list[int]]:
    """Tile registers: C tiles first (row-major), then A tiles, then B tiles."""
    c_tiles = {(r, c): r * tiles.column_tiles + c for r in range(tiles.row_tiles) for c in range(tiles.column_tiles)}
    a_tiles = [len(c_tiles) + r for r in range(tiles.row_tiles)]
    b_tiles = [len(c_tiles) + tiles.row_tiles + c for c in range(tiles.column_tiles)]
    return c_tiles, a_tiles, b_tiles


def _impl(kind: TileKind, tiles: Tiles, k: int, emulated: bool) -> tirx.PrimFunc:
    """The tile program of `_register`'s description, built statement by statement (TVMScript
    has no Python-level loops, and every tile number must be an immediate), on the hardware's
    tile instructions or on their emulation (`_EmulatedTiles`)."""
    height, width, pack, words = tiles.rows * tiles.row_tiles, tiles.column_tiles * COLUMNS, kind.pack, k // kind.pack
    c_tiles, a_tiles, b_tiles = _tile_numbers(tiles)
    shapes = _shapes(kind, tiles, ROW_BYTES)

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
                with (_EmulatedTiles if emulated else _HardwareTiles)(shapes, [A, B, C]) as machine:
                    for tile in c_tiles.values():
                        machine.zero(tile)
                    with tb.serial(0, k // kind.depth) as step:
                        for r, tile in enumerate(a_tiles):
                            machine.load(tile, A, r * tiles.rows * a_stride + step * kind.depth, a_stride)
                        for c, tile in enumerate(b_tiles):
                            machine.load(tile, B, c * b_stride + step * COLUMNS * COLUMNS * pack, COLUMNS * pack)
                        for (r, c), tile in c_tiles.items():
                            machine.product(kind, tile, a_tiles[r], b_tiles[c])
                    for (r, c), tile in c_tiles.items():
                        machine.store(tile, C, r * tiles.rows * c_stride + c * COLUMNS, c_stride)
    return builder.get()


def _intrinsic(name: str, *args) -> None:
    tb.evaluate(tb.call_llvm_intrin("void", name, *args))


class _HardwareTiles:
    """The tile instructions, emitted into the program being built. Offsets and strides are in
    elements of the buffer a tile is loaded from or stored to; each tile's rows and bytes per
    row are its entry of `shapes` (`_shapes`)."""

    def __init__(self, shapes: list[tuple[int, int, str]], buffers: list[tirx.Buffer]):
        self.shapes = shapes

    def __enter__(self) -> _HardwareTiles:
        # The 64-byte tile configuration: palette 1 at byte 0; from byte 16 each tile's bytes
        # per row (2 bytes each), from byte 48 its rows (1 byte each).
        config = tb.alloc_buffer((64,), "uint8", scope="local")
        with tb.serial(0, 64) as byte:
            tb.buffer_store(config, tb.uint8(0), [byte])
        tb.buffer_store(config, tb.uint8(1), [0])
        for tile, (rows, row_bytes, _) in enumerate(self.shapes):
            tb.buffer_store(config, tb.uint8(row_bytes), [16 + 2 * tile])
            tb.buffer_store(config, tb.uint8(rows), [48 + tile])
        _intrinsic("llvm.x86.ldtilecfg", config.access_ptr("r"))
        return self

    def __exit__(self, *error) -> None:
        _intrinsic("llvm.x86.tilerelease")

    def zero(self, tile: int) -> None:
        _intrinsic("llvm.x86.tilezero", tb.int8(tile))

    def load(self, tile: int, buffer: tirx.Buffer, offset, stride) -> None:
        _intrinsic("llvm.x86.tileloadd64", tb.int8(tile), buffer.access_ptr("r", offset=offset),
                   _bytes(stride, buffer.dtype))

    def product(self, kind: TileKind, c: int, a: int, b: int) -> None:
        _intrinsic(kind.instruction, tb.int8(c), tb.int8(a), tb.int8(b))

    def store(self, tile: int, buffer: tirx.Buffer, offset, stride) -> None:
        _intrinsic("llvm.x86.tilestored64", tb.int8(tile), buffer.access_ptr("w", offset=offset),
                   _bytes(stride, buffer.dtype))


def _bytes(stride, dtype: str) -> tirx.PrimExpr:
    return (tirx.const(stride, "int32") if isinstance(stride, int) else stride).astype("int64") * _size(dtype)


class _EmulatedTiles:
    """The same program on tile registers emulated in scalar TIR: each register a local buffer
    of its rows x bytes per row (as elements of the type the program keeps in it), each instruction
    the loops of its definition in Intel's manual, each load and store at the element offset and
    row stride the hardware would take. It runs on any host, so every address, stride and tile
    number of a tile program is tested where AMX is absent; only the instructions themselves need
    an AMX host (the `amx` tests)."""

    def __init__(self, shapes: list[tuple[int, int, str]], buffers: list[tirx.Buffer]):
        self.shapes, self.buffers = shapes, buffers

    def __enter__(self) -> _EmulatedTiles:
        self.registers = [tb.alloc_buffer((rows, row_bytes // _size(dtype)), dtype, scope="local")
                          for rows, row_bytes, dtype in self.shapes]
        # Each operand's memory as one dimension from its first element, as the hardware
        # addresses it; the bound is one no kernel's operand reaches.
        self.flat = [(buffer, tb.decl_buffer((1 << 30,), buffer.dtype, data=buffer.data,
                                             elem_offset=buffer.elem_offset, scope=buffer.scope()))
                     for buffer in self.buffers]
        return self

    def __exit__(self, *error) -> None:
        pass

    def zero(self, tile: int) -> None:
        register = self.registers[tile]
        with tb.grid(*register.shape) as (i, j):
            tb.buffer_store(register, tirx.const(0, register.dtype), [i, j])

    def load(self, tile: int, buffer: tirx.Buffer, offset, stride) -> None:
        register, flat = self.registers[tile], self._flat(buffer)
        with tb.grid(*register.shape) as (i, j):
            tb.buffer_store(register, flat[offset + i * stride + j], [i, j])

    def store(self, tile: int, buffer: tirx.Buffer, offset, stride) -> None:
        register, flat = self.registers[tile], self._flat(buffer)
        with tb.grid(*register.shape) as (i, j):
            tb.buffer_store(flat, register[i, j], [offset + i * stride + j])

    def product(self, kind: TileKind, c: int, a: int, b: int) -> None:
        """C[m, n] += sum over k and p of A[m, k * pack + p] * B[k, n * pack + p]."""
        C, A, B = (self.registers[t] for t in (c, a, b))
        rows, columns = C.shape
        with tb.grid(rows, columns, int(A.shape[1]) // kind.pack, kind.pack) as (m, n, word, p):
            tb.buffer_store(C, C[m, n] + kind.product(A[m, word * kind.pack + p], B[word, n * kind.pack + p]), [m, n])

    def _flat(self, buffer: tirx.Buffer) -> tirx.Buffer:
        return next(flat for operand, flat in self.flat if operand.same_as(buffer))


def _size(dtype: str) -> int:
    return tvm.DataType(dtype).bits // 8
