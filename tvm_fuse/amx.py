"""AMX on the compute side: which shapes fit the tiles (the rules the compute definitions and
the realization passes follow; the tile programs are `schedules.amx`), and the operating
system's permission.

Linux runs tile instructions only in a process that asked. The CPU may have AMX while the kernel keeps its tile state off (XCR0 bits 17-18 clear, as some
hypervisors do), and even where the kernel supports it, a process must ask once with
`arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)` before its first tile instruction, or that
instruction raises SIGILL. `amx_permitted` does both checks and asks; AMX counts as a host
feature only when it returns True, and a compiled model whose kernels run tile programs
(`uses_tiles`) refuses to run in a process where it is False.
"""

from __future__ import annotations

import ctypes
import functools
import platform
import sys

import tvm
import tvm_ffi

from .ir_names import CONV_NCHWC_AMX_RULE, SCHEDULE_RULE

AMX_COLUMNS = 16  # C columns per AMX tile: a dense weight's packing block must be this
AMX_ROW_BYTES = 64  # bytes of K per AMX tile row: K times the input's bytes must be a multiple
AMX_ROWS = 16  # rows per AMX tile (at most): a dense's rows or a conv's output pixels per tile
AMX_MIN_TILE_ROWS = 8  # the fewest pixels per tile an AMX conv takes where padding its width gives more
AMX_CONV_OUT_BLOCKS = (32, 16, 8)  # a conv's output blocks on tiles: two C tiles of 16 columns, one, or one of 8
AMX_MIN_CONV_ROW_BYTES = 16  # the shortest channel block a conv runs on tiles with (`fits_amx_conv`)


def fits_amx(k: int, element_bytes: int, block: int) -> bool:
    """Whether a dense product over a reduction of `k` inputs of `element_bytes` each, its
    weight packed in blocks of `block` columns, fits AMX tiles: blocks of a tile's 16 columns,
    and K in whole 64-byte tile rows (32 bf16, 64 int8)."""
    return block == AMX_COLUMNS and k * element_bytes % AMX_ROW_BYTES == 0


def fits_amx_conv(in_block: int, element_bytes: int, out_block: int, out_width: int) -> bool:
    """Whether an NCHW{in_block}c conv of inputs of `element_bytes` fits AMX tiles: each
    pixel's channel block is a tile row (whole 4-byte words, at most 64 bytes), output blocks
    are two tiles' 32 columns, a tile's 16 or 8, and a row has two pixels or more (a tile of one
    row is a dense's), unless its blocks are two tiles' (which no vector kernel computes in bf16).
    Blocks under 16 bytes (an RGB stem's 4 channels) stay on the vector units: a tile step
    that short would mostly load tiles (not yet measured on an AMX host)."""
    row_bytes = in_block * element_bytes
    return row_bytes % 4 == 0 and AMX_MIN_CONV_ROW_BYTES <= row_bytes <= AMX_ROW_BYTES \
        and out_block in AMX_CONV_OUT_BLOCKS and (out_width > 1 or out_block > AMX_COLUMNS)


def amx_input_blocks(in_block: int, element_bytes: int, in_chunks: int) -> int:
    """How many neighbouring input channel blocks of an NCHW{in_block}c conv on AMX tiles one
    tile row holds: the most whose bytes fit the row's 64 and that divide the input's
    `in_chunks` blocks. A row of one 16-channel block is half a bf16 tile step's depth and a
    quarter of an int8 one's, at the cost of a whole step."""
    fitting = range(1, AMX_ROW_BYTES // (in_block * element_bytes) + 1)
    return max(group for group in fitting if in_chunks % group == 0)


def amx_conv_layout(in_block: int, element_bytes: int, in_chunks: int, kernel_w: int, out_block: int,
                    out_width: int) -> tuple[bool, int] | None:
    """How an NCHW{in_block}c conv (groups of 1) runs on AMX tiles: (fold, group). `fold`: over
    one input block whose row of kernel taps is a tile row (`conv.fold_row_taps`); otherwise
    `group` neighbouring input blocks per tile row (`amx_input_blocks`). None where its shape
    does not fit tiles (`fits_amx_conv`). Rows are counted in whole 4-byte words (an odd bf16
    block gets a zero channel)."""
    def words(values: int) -> int:
        return values + -values % (4 // element_bytes)

    if in_chunks == 1 and kernel_w > 1 and fits_amx_conv(words(kernel_w * in_block), element_bytes, out_block,
                                                         out_width):
        return True, 1
    if fits_amx_conv(words(in_block), element_bytes, out_block, out_width):
        return False, amx_input_blocks(in_block, element_bytes, in_chunks)
    return None


def amx_conv_output(size) -> tuple[int, int]:
    """The output an AMX conv computes, of which the conv's (rows, width) `size` is cut
    (`conv.crop`): its rows rounded up to an even count, so that a C block may span 2 output rows
    (`schedules.amx.conv.ConvTiles.output_rows`) also where the height is odd (ResNet-50's 7x7 stage);
    a width with no divisor from 8 to 16 (SqueezeNet's 111: tiles of 3 pixels) beyond its own
    rounded up to the next that has one (112: tiles of 16)."""
    def tile(width: int) -> int:  # the longest tile of pixels a row of `width` splits into
        return max(divisor for divisor in range(1, AMX_ROWS + 1) if width % divisor == 0)

    rows, width = (int(extent) for extent in size)
    if width > AMX_MIN_TILE_ROWS:
        width = next(w for w in range(width, width + AMX_ROWS) if tile(w) >= AMX_MIN_TILE_ROWS)
    return rows + rows % 2 * (rows > 1), width


def amx_conv_attrs(strides, dilation) -> dict:
    """The attributes of a conv computed on AMX tiles: its rule, and the window's steps the
    tile program needs (`schedules.amx.conv`)."""
    return {SCHEDULE_RULE: CONV_NCHWC_AMX_RULE, "stride": int(strides[1]), "stride_h": int(strides[0]),
            "dilation_h": int(dilation[0]), "dilation_w": int(dilation[1])}


_SYS_ARCH_PRCTL = 158  # x86-64
_ARCH_GET_XCOMP_SUPP = 0x1021  # the xfeatures the kernel supports (what it enabled in XCR0)
_ARCH_REQ_XCOMP_PERM = 0x1023
_XFEATURE_XTILECFG, _XFEATURE_XTILEDATA = 17, 18
_TILE_STATE = (1 << _XFEATURE_XTILECFG) | (1 << _XFEATURE_XTILEDATA)


@functools.cache
def amx_permitted() -> bool:
    """True when the kernel supports AMX tile state and has granted this process its use
    (asked for here, once; granting is idempotent and lasts for the process)."""
    if sys.platform != "linux" or platform.machine() != "x86_64":
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    supported = ctypes.c_uint64(0)
    if libc.syscall(_SYS_ARCH_PRCTL, _ARCH_GET_XCOMP_SUPP, ctypes.byref(supported)) != 0:
        return False  # a kernel older than 5.16 knows no AMX
    if supported.value & _TILE_STATE != _TILE_STATE:
        return False
    return libc.syscall(_SYS_ARCH_PRCTL, _ARCH_REQ_XCOMP_PERM, _XFEATURE_XTILEDATA) == 0


def uses_tiles(mod: tvm.IRModule) -> bool:
    """Whether any kernel of `mod` runs AMX tile instructions: every tile program starts by
    loading its configuration (`llvm.x86.ldtilecfg`)."""
    from tvm.target import codegen

    call_llvm_intrin = tvm.ir.Op.get("tirx.call_llvm_intrin")
    ldtilecfg = codegen.llvm_lookup_intrinsic_id("llvm.x86.ldtilecfg")
    found = []

    def visit(call: tvm.ir.expr.Call) -> None:
        if call.op.same_as(call_llvm_intrin) and int(call.args[0]) == ldtilecfg:
            found.append(call)

    for func in mod.functions.values():
        if isinstance(func, tvm.tirx.PrimFunc):
            tvm_ffi.structural_walk(func.body, (tvm.ir.expr.Call, visit))
    return bool(found)
