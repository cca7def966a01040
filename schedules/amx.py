"""AMX tile intrinsics: a block of C, `row_tiles * rows` x `column_tiles * 16`, summed over the
whole reduction K on the matrix engine (Intel AMX: `tdpbf16ps` for bf16, `tdpbusd` for u8 x s8).

One intrinsic call is the whole life of the tiles: load the tile configuration (in the calling
thread: each parallel task configures its own), zero the C tiles, then for each 64-byte step of
K load `row_tiles` A tiles (`rows` rows of 64 bytes at the activation's row stride) and
`column_tiles` B tiles (16 rows of 64 bytes: the packed weight [N/16, K/pack, 16, pack] IS the
B-tile layout, 64 / pack K values per row) and multiply every A tile with every B tile into
its C tile; finally store C to the caller's buffer (a small stack tile the fused epilogue reads
in AVX-512) and release the tiles. At most 8 tile registers: A + B + C tiles <= 8.

TVM 0.27 emits AMX through LLVM's x86 intrinsics on tile numbers (immediates); they compile
for any target with amx-tile (`-mcpu=sapphirerapids`) and run only where the OS permits
(`tvm_fuse.amx`). K differs per layer and the intrinsic covers all of it, so each
(kind, tiles, K) is registered on first use.
"""

from __future__ import annotations

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

from ..compute.bf16 import from_bits

TILE_REGISTERS = 8
ROW_BYTES = 64  # bytes per tile row
COLUMNS = 16  # C columns per tile: a row of 64 bytes of fp32 / s32
MAX_ROWS = 16  # rows per tile


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


def tile_product(kind: TileKind, tiles: Tiles, k: int) -> str:
    """The registered name of the intrinsic for a C block of `tiles` over a reduction of `k`
    (a multiple of `kind.depth`), registering it on first use."""
    emulated = _EMULATED.get()
    name = f"tvm_fuse.amx_{kind.name}_{tiles.row_tiles}x{tiles.rows}_{tiles.column_tiles}x{COLUMNS}_k{k}" \
        + ("_emulated" if emulated else "")
    if TensorIntrin.get(name, allow_missing=True) is None:
        _register(name, kind, tiles, k, emulated)
    return name


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


def tensorize_tiles(sch: s_tir.Schedule, loop, kind: TileKind, tiles: Tiles, k: int) -> None:
    """Compute the block under `loop` (a C block of `tiles` over all `k` of the reduction) with
    the tile program, and drop the block's init: the program's tilezero is C's init, and the
    zeroing loop TVM keeps (a memset of the whole C block per task) would only be overwritten."""
    block = sch.blockize(loop)
    if any(int(v.dom.extent) != 1 for v in sch.get(block).iter_vars if v.iter_type == tirx.IterVar.CommReduce):
        raise ValueError(f"an AMX block must span the whole reduction (K={k})")
    sch.tensorize(block, tile_product(kind, tiles, k))
    old = sch.get(block)
    new = SBlock(old.iter_vars, old.reads, old.writes, old.name_hint, old.body, None,
                 old.alloc_buffers, old.match_buffers, old.annotations)
    sch.state.replace(sch.get_sref(block), new, {old: new})


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
        B = T.match_buffer(b, (tiles.column_tiles, words, COLUMNS, pack), kind.b, offset_factor=1)
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


def _impl(kind: TileKind, tiles: Tiles, k: int, emulated: bool) -> tirx.PrimFunc:
    """The tile program of `_register`'s description, built statement by statement (TVMScript
    has no Python-level loops, and every tile number must be an immediate), on the hardware's
    tile instructions or on their emulation (`_EmulatedTiles`)."""
    height, width, pack, words = tiles.rows * tiles.row_tiles, tiles.column_tiles * COLUMNS, kind.pack, k // kind.pack
    # Tile registers: C tiles first (row-major), then A tiles, then B tiles.
    c_tiles = {(r, c): r * tiles.column_tiles + c for r in range(tiles.row_tiles) for c in range(tiles.column_tiles)}
    a_tiles = [len(c_tiles) + r for r in range(tiles.row_tiles)]
    b_tiles = [len(c_tiles) + tiles.row_tiles + c for c in range(tiles.column_tiles)]
    shapes = [(tiles.rows, kind.c)] * len(c_tiles) + [(tiles.rows, kind.a)] * tiles.row_tiles \
        + [(COLUMNS, kind.b)] * tiles.column_tiles  # (rows, element type) per tile register

    with IRBuilder() as builder:
        with tb.prim_func(s_tir=True):
            tb.func_name("impl")
            handles = [tb.arg(n, tb.handle()) for n in ("a", "b", "c")]
            a_stride, c_stride = tb.int32(), tb.int32()
            A = tb.match_buffer(handles[0], (height, k), kind.a, strides=[a_stride, 1], offset_factor=1)
            B = tb.match_buffer(handles[1], (tiles.column_tiles, words, COLUMNS, pack), kind.b, offset_factor=1)
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
                            machine.load(tile, B, (c * words + step * COLUMNS) * COLUMNS * pack, COLUMNS * pack)
                        for (r, c), tile in c_tiles.items():
                            machine.product(kind, tile, a_tiles[r], b_tiles[c])
                    for (r, c), tile in c_tiles.items():
                        machine.store(tile, C, r * tiles.rows * c_stride + c * COLUMNS, c_stride)
    return builder.get()


def _intrinsic(name: str, *args) -> None:
    tb.evaluate(tb.call_llvm_intrin("void", name, *args))


class _HardwareTiles:
    """The tile instructions, emitted into the program being built. Offsets and strides are in
    elements of the buffer a tile is loaded from or stored to; rows are 64 bytes."""

    def __init__(self, shapes: list[tuple[int, str]], buffers: list[tirx.Buffer]):
        self.shapes = shapes

    def __enter__(self) -> _HardwareTiles:
        # The 64-byte tile configuration: palette 1 at byte 0; from byte 16 each tile's bytes
        # per row (2 bytes each), from byte 48 its rows (1 byte each).
        config = tb.alloc_buffer((64,), "uint8", scope="local")
        with tb.serial(0, 64) as byte:
            tb.buffer_store(config, tb.uint8(0), [byte])
        tb.buffer_store(config, tb.uint8(1), [0])
        for tile, (rows, _) in enumerate(self.shapes):
            tb.buffer_store(config, tb.uint8(ROW_BYTES), [16 + 2 * tile])
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
    return (tirx.const(stride, "int32") if isinstance(stride, int) else stride).astype("int64") \
        * (tvm.DataType(dtype).bits // 8)


class _EmulatedTiles:
    """The same program on tile registers emulated in scalar TIR: each register a local buffer
    of its rows x 64 bytes (as elements of the type the program keeps in it), each instruction
    the loops of its definition in Intel's manual, each load and store at the element offset and
    row stride the hardware would take. It runs on any host, so every address, stride and tile
    number of a tile program is tested where AMX is absent; only the instructions themselves need
    an AMX host (the `amx` tests)."""

    def __init__(self, shapes: list[tuple[int, str]], buffers: list[tirx.Buffer]):
        self.shapes, self.buffers = shapes, buffers

    def __enter__(self) -> _EmulatedTiles:
        self.registers = [tb.alloc_buffer((rows, ROW_BYTES // _size(dtype)), dtype, scope="local")
                          for rows, dtype in self.shapes]
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
        with tb.grid(rows, columns, COLUMNS, kind.pack) as (m, n, word, p):
            tb.buffer_store(C, C[m, n] + kind.product(A[m, word * kind.pack + p], B[word, n * kind.pack + p]), [m, n])

    def _flat(self, buffer: tirx.Buffer) -> tirx.Buffer:
        return next(flat for operand, flat in self.flat if operand.same_as(buffer))


def _size(dtype: str) -> int:
    return tvm.DataType(dtype).bits // 8
