"""The tile machine: the AMX products (`TileKind`), a program's tile registers and their
numbering, and the two machines a tile program is emitted for: the hardware's tile
instructions, and their emulation in scalar TIR that runs on any host (`emulated_tiles`).

TVM 0.27 emits AMX through LLVM's x86 intrinsics on tile numbers (immediates); they compile
for any target with amx-tile (`-mcpu=sapphirerapids`) and run only where the OS permits
(`tvm_fuse.amx`)."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

import tvm
from tvm import s_tir, tirx
from tvm.s_tir import SBlock
from tvm.tirx.script.builder import ir as tb

from ...amx import AMX_COLUMNS as COLUMNS  # C columns per tile: a row of 64 bytes of fp32 / s32
from ...amx import AMX_ROWS as MAX_ROWS  # rows per tile
from ...compute.bf16 import from_bits

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


def kind_of(sch: s_tir.Schedule, block) -> TileKind:
    """The product a scheduled block computes, by its weight's type: s8 is int8, else bf16 bits."""
    return INT8 if str(sch.get(block).reads[1].source.dtype) == "int8" else BF16


@dataclass(frozen=True)
class Tiles:
    """A block of C in tiles: `row_tiles` x `column_tiles` C tiles of `rows` x 16."""
    rows: int  # rows per tile, at most 16
    row_tiles: int = 1
    column_tiles: int = 1

    def fits(self) -> bool:
        """Within the tile registers: one per A tile, B tile and C tile."""
        count = self.row_tiles * self.column_tiles + self.row_tiles + self.column_tiles
        return 1 <= self.rows <= MAX_ROWS and count <= TILE_REGISTERS


@dataclass(frozen=True)
class Registers:
    """A tile program's tile registers: C tiles first (by (A tile, B tile)), then A tiles, then
    B tiles, the one numbering of every program."""
    c: dict[tuple[int, int], int]
    a: list[int]
    b: list[int]

    def shapes(self, c: tuple, a: tuple, b: tuple) -> list[tuple[int, int, str]]:
        """Each register's (rows, bytes per row, element type), in register order, from the
        shape of a C, an A and a B tile: the machine's configuration."""
        return [c] * len(self.c) + [a] * len(self.a) + [b] * len(self.b)


def registers(a_tiles: int, b_tiles: int, a_registers: int | None = None) -> Registers:
    """The registers of a program with a C tile for each of `a_tiles` A tiles and `b_tiles` B
    tiles; the A tiles take turns in `a_registers` (default: one each)."""
    c = {(t, u): t * b_tiles + u for t in range(a_tiles) for u in range(b_tiles)}
    a = [len(c) + r for r in range(a_tiles if a_registers is None else a_registers)]
    return Registers(c, a, [len(c) + len(a) + u for u in range(b_tiles)])


def machine(shapes: list[tuple[int, int, str]], buffers: list[tirx.Buffer]):
    """The machine a program is being built for: the emulation within `emulated_tiles`, else
    the hardware."""
    return (_EmulatedTiles if emulated() else _HardwareTiles)(shapes, buffers)


def emulated() -> bool:
    """Whether tile programs are being built as their emulation (`emulated_tiles`)."""
    return _EMULATED.get()


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
    program `intrinsic` (`dense.tile_product`, `conv.conv_tile_product`), and drop the block's init: the
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


def _intrinsic(name: str, *args) -> None:
    tb.evaluate(tb.call_llvm_intrin("void", name, *args))


class _HardwareTiles:
    """The tile instructions, emitted into the program being built. Offsets and strides are in
    elements of the buffer a tile is loaded from or stored to; each tile's rows and bytes per
    row are its entry of `shapes` (`Registers.shapes`)."""

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
    return (tirx.const(stride, "int32") if isinstance(stride, int) else stride).astype("int64") * element_bytes(dtype)


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
        self.registers = [tb.alloc_buffer((rows, row_bytes // element_bytes(dtype)), dtype, scope="local")
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


def element_bytes(dtype: str) -> int:
    return tvm.DataType(dtype).bits // 8
