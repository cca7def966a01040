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
    name = f"tvm_fuse.amx_{kind.name}_{tiles.row_tiles}x{tiles.rows}_{tiles.column_tiles}x{COLUMNS}_k{k}"
    if TensorIntrin.get(name, allow_missing=True) is None:
        _register(name, kind, tiles, k)
    return name


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

    TensorIntrin.register(name, desc, _impl(kind, tiles, k))


def _impl(kind: TileKind, tiles: Tiles, k: int) -> tirx.PrimFunc:
    """The tile program of `_register`'s description, built statement by statement (TVMScript
    has no Python-level loops, and every tile number must be an immediate)."""
    height, width, pack, words = tiles.rows * tiles.row_tiles, tiles.column_tiles * COLUMNS, kind.pack, k // kind.pack
    # Tile registers: C tiles first (row-major), then A tiles, then B tiles.
    c_tiles = {(r, c): r * tiles.column_tiles + c for r in range(tiles.row_tiles) for c in range(tiles.column_tiles)}
    a_tiles = [len(c_tiles) + r for r in range(tiles.row_tiles)]
    b_tiles = [len(c_tiles) + tiles.row_tiles + c for c in range(tiles.column_tiles)]
    tile_rows = [tiles.rows] * (len(c_tiles) + tiles.row_tiles) + [COLUMNS] * tiles.column_tiles
    a_bytes, c_bytes = tvm.DataType(kind.a).bits // 8, tvm.DataType(kind.c).bits // 8

    def intrinsic(name: str, *args) -> None:
        tb.evaluate(tb.call_llvm_intrin("void", name, *args))

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
                # The 64-byte tile configuration: palette 1 at byte 0; from byte 16 each tile's
                # bytes per row (2 bytes each), from byte 48 its rows (1 byte each).
                config = tb.alloc_buffer((64,), "uint8", scope="local")
                with tb.serial(0, 64) as byte:
                    tb.buffer_store(config, tb.uint8(0), [byte])
                tb.buffer_store(config, tb.uint8(1), [0])
                for tile, count in enumerate(tile_rows):
                    tb.buffer_store(config, tb.uint8(ROW_BYTES), [16 + 2 * tile])
                    tb.buffer_store(config, tb.uint8(count), [48 + tile])
                intrinsic("llvm.x86.ldtilecfg", config.access_ptr("r"))
                for tile in c_tiles.values():
                    intrinsic("llvm.x86.tilezero", tb.int8(tile))
                with tb.serial(0, k // kind.depth) as step:
                    for r, tile in enumerate(a_tiles):
                        offset = r * tiles.rows * a_stride + step * kind.depth
                        intrinsic("llvm.x86.tileloadd64", tb.int8(tile), A.access_ptr("r", offset=offset),
                                  (a_stride * a_bytes).astype("int64"))
                    for c, tile in enumerate(b_tiles):
                        offset = (c * words + step * COLUMNS) * COLUMNS * pack
                        intrinsic("llvm.x86.tileloadd64", tb.int8(tile), B.access_ptr("r", offset=offset),
                                  tb.int64(ROW_BYTES))
                    for (r, c), tile in c_tiles.items():
                        intrinsic(kind.instruction, tb.int8(tile), tb.int8(a_tiles[r]), tb.int8(b_tiles[c]))
                for (r, c), tile in c_tiles.items():
                    offset = r * tiles.rows * c_stride + c * COLUMNS
                    intrinsic("llvm.x86.tilestored64", tb.int8(tile), C.access_ptr("w", offset=offset),
                              (c_stride * c_bytes).astype("int64"))
                intrinsic("llvm.x86.tilerelease")
    return builder.get()
