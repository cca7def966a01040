"""The u8 x s8 -> s32 dot products our int8 kernels are tensorized with: a `lanes` x 4 block
`acc[i] += sum_k data[k] * weight[i, k]`, 4 input bytes broadcast against 4 x `lanes` weight
bytes, for 16 lanes (zmm) and 8 (ymm: output channels in blocks of 8, e.g. 24 channels).
TVM registers the same products (`dot_16x4_vnni`) for a global accumulator; ours accumulate
in a register tile (`local` scope), which is what the kernels' `cache_write` makes."""

from __future__ import annotations

import threading

from tvm import tirx
from tvm.s_tir import TensorIntrin
from tvm.script import tirx as T
from tvm.script.ir_builder import IRBuilder
from tvm.tirx.script.builder import ir as tb

from ..compute.dense_int8 import LLVM_INTRINSICS

# Each product is registered on first use: parsing their TVMScript took most of `import tvm_fuse`.
_REGISTERING = threading.Lock()


def _registered(name: str, register) -> str:
    """`name`, after `register()` has registered it unless it already was."""
    with _REGISTERING:
        if TensorIntrin.get(name, allow_missing=True) is None:
            register()
    return name


def _product(lanes: int, depth: int, dtypes: tuple[str, str, str], widen, step=None, llvm_ir: str = ""):
    """`acc[i] += sum_k widen(a[k]) * widen(b[i, k])` over a `lanes` x `depth` block of
    (a, b, acc) `dtypes`: as loops (a description) where `step` is None, else one vector step,
    `step(word, B, C)` of the `depth` values of `a` read as one int32 `word`, with the LLVM IR it
    calls linked in (`llvm_ir`)."""
    a_dtype, b_dtype, acc_dtype = dtypes

    @T.prim_func(s_tir=True)
    def product(
        A: T.Buffer((depth,), a_dtype, offset_factor=1),
        B: T.Buffer((lanes, depth), b_dtype, offset_factor=1),
        C: T.Buffer((lanes,), acc_dtype, offset_factor=1, scope="local"),
    ) -> None:
        with T.sblock("root"):
            T.reads(C[0:lanes], A[0:depth], B[0:lanes, 0:depth])
            T.writes(C[0:lanes])
            if step is None:
                for i in T.serial(0, lanes):
                    for k in T.serial(0, depth):
                        with T.sblock("update"):
                            vi, vk = T.axis.remap("SR", [i, k])
                            C[vi] = C[vi] + widen(A[vk]) * widen(B[vi, vk])
            elif not llvm_ir:
                word = T.reinterpret(A.vload([0], f"{a_dtype}x{depth}"), dtype="int32")
                C[T.ramp(T.int32(0), 1, lanes)] = step(word, B, C)
            else:
                with T.attr(0, "pragma_import_llvm", llvm_ir):
                    word = T.reinterpret(A.vload([0], f"{a_dtype}x{depth}"), dtype="int32")
                    C[T.ramp(T.int32(0), 1, lanes)] = step(word, B, C)

    return product


def dot_product(lanes: int, vnni: bool) -> str:
    """The registered name of the `lanes` x 4 dot product, with VNNI or without."""
    return _registered(_dot_name(lanes, vnni), lambda: _register(lanes))


def _dot_name(lanes: int, vnni: bool) -> str:
    return f"tvm_fuse.dot_{lanes}x4_u8s8s32_{'vnni' if vnni else 'avx512'}"


def _register(lanes: int) -> None:
    vpdpbusd, pmaddubsw, pmaddwd = LLVM_INTRINSICS[lanes]
    acc, bytes_, pairs, weights = f"int32x{lanes}", f"uint8x{4 * lanes}", f"int16x{2 * lanes}", f"int8x{4 * lanes}"

    def vnni(word, B, C):
        return T.call_llvm_pure_intrin(
            T.llvm_lookup_intrinsic_id(vpdpbusd), C.vload([0], dtype=acc),
            T.reinterpret(T.broadcast(word, lanes), dtype=bytes_),  # LLVM 22 takes bytes
            B.vload([0, 0], dtype=weights), dtype=acc)

    def avx512(word, B, C):
        # Pairs of u8 x s8 products summed in int16 (saturating), then pairs of those in s32.
        summed = T.call_llvm_pure_intrin(T.llvm_lookup_intrinsic_id(pmaddubsw),
                                         T.reinterpret(T.broadcast(word, lanes), dtype=bytes_),
                                         B.vload([0, 0], dtype=weights), dtype=pairs)
        return C.vload([0], dtype=acc) + T.call_llvm_pure_intrin(
            T.llvm_lookup_intrinsic_id(pmaddwd), summed, T.broadcast(T.int16(1), 2 * lanes), dtype=acc)

    def widen(value):
        return T.cast(value, "int32")

    dtypes = ("uint8", "int8", "int32")
    desc = _product(lanes, 4, dtypes, widen)
    TensorIntrin.register(_dot_name(lanes, True), desc, _product(lanes, 4, dtypes, widen, vnni))
    TensorIntrin.register(_dot_name(lanes, False), desc, _product(lanes, 4, dtypes, widen, avx512))


# bf16 x bf16 -> fp32 pair dot products, `acc[i] += a[2i+1] * b[2i+1] + a[2i] * b[2i]` over 32-bit
# words of two bf16 each: AVX512-BF16's `vdpbf16ps`. Its LLVM intrinsic takes `bfloat` vectors,
# a type TVM's code generator cannot emit (see `tvm_fuse.compute.bf16`), so the kernel calls a
# function on i32 words, written in LLVM IR and linked into the kernel (`pragma_import_llvm`),
# which bitcasts them. `portable`: the same function in plain fp32 arithmetic, the instruction's
# documented order of operations, so the kernels can be checked on hosts without the instruction.
def bf16_dot_product(lanes: int, native: bool) -> str:
    """The registered name of the `lanes` x 2 bf16 dot product, on `vdpbf16ps` or portable."""
    name = f"tvm_fuse.dot_{lanes}x2_bf16f32_{'native' if native else 'portable'}"
    return _registered(name, lambda: _register_bf16(name, lanes, native))


def bf16_llvm(lanes: int, native: bool) -> tuple[str, str]:
    """(function name, LLVM IR) of the `lanes`-wide pair dot product."""
    name = f"tvm_fuse_dpbf16ps_{lanes}_{'native' if native else 'portable'}"
    f32, i32 = f"<{lanes} x float>", f"<{lanes} x i32>"
    header = f"define {f32} @{name}({f32} %acc, {i32} %a, {i32} %b) {{\n"
    if native:
        bf16 = f"<{2 * lanes} x bfloat>"
        intrinsic = f"llvm.x86.avx512bf16.dpbf16ps.{32 * lanes}"
        return name, (
            f"declare {f32} @{intrinsic}({f32}, {bf16}, {bf16})\n" + header
            + f"  %ab = bitcast {i32} %a to {bf16}\n  %bb = bitcast {i32} %b to {bf16}\n"
            + f"  %r = call {f32} @{intrinsic}({f32} %acc, {bf16} %ab, {bf16} %bb)\n  ret {f32} %r\n}}\n")

    def splat(value: int) -> str:
        return "<" + ", ".join([f"i32 {value}"] * lanes) + ">"

    body = []
    for operand in ("a", "b"):  # each word's upper bf16 is its fp32's upper half; the lower one shifted up
        body += [f"  %{operand}hi.i = and {i32} %{operand}, {splat(-65536)}",
                 f"  %{operand}lo.i = shl {i32} %{operand}, {splat(16)}",
                 f"  %{operand}hi = bitcast {i32} %{operand}hi.i to {f32}",
                 f"  %{operand}lo = bitcast {i32} %{operand}lo.i to {f32}"]
    body += [f"  %phi = fmul {f32} %ahi, %bhi", f"  %s = fadd {f32} %acc, %phi",
             f"  %plo = fmul {f32} %alo, %blo", f"  %r = fadd {f32} %s, %plo", f"  ret {f32} %r"]
    return name, header + "\n".join(body) + "\n}\n"


def _register_bf16(name: str, lanes: int, native: bool) -> None:
    function, llvm_ir = bf16_llvm(lanes, native)
    acc = f"float32x{lanes}"

    def step(word, B, C):
        return T.call_pure_extern(acc, function, C.vload([0], dtype=acc), T.broadcast(word, lanes),
                                  T.reinterpret(B.vload([0, 0], dtype=f"uint16x{2 * lanes}"), dtype=f"int32x{lanes}"))

    def widen(value):  # a bf16's bits are the upper half of its fp32's
        return T.reinterpret("float32", T.shift_left(T.Cast("uint32", value), T.uint32(16)))

    dtypes = ("uint16", "uint16", "float32")
    TensorIntrin.register(name, _product(lanes, 2, dtypes, widen), _product(lanes, 2, dtypes, widen, step, llvm_ir))


# A max or min across the lanes of a vector, `c = max(c, a[0], ..., a[lanes - 1])`: its halves
# folded onto each other, log2(lanes) vector steps. A reduction loop over the lanes is a chain
# of scalar steps; LLVM's `vector.reduce.fmax` (without `nnan`) the same chain with NaN checks;
# TE stages of halves were narrowed by LLVM to pairs of lanes.
_ACROSS = {"max": tirx.max, "min": tirx.min}


def across(reduction: str, lanes: int) -> str:
    """The registered name of the `reduction` ("max" or "min") across `lanes` lanes,
    registering it on first use."""
    name = f"tvm_fuse.across_{reduction}_{lanes}"
    return _registered(name, lambda: TensorIntrin.register(name, _across_desc(reduction, lanes),
                                                           _across_impl(reduction, lanes)))


def _across_desc(reduction: str, lanes: int):
    @T.prim_func(s_tir=True)
    def desc(A: T.Buffer((lanes,), "float32", offset_factor=1), C: T.Buffer((1,), "float32", offset_factor=1)) -> None:
        with T.sblock("root"):
            T.reads(C[0], A[0:lanes])
            T.writes(C[0])
            for i in T.serial(0, lanes):
                with T.sblock("update"):
                    vi = T.axis.remap("R", [i])
                    C[0] = (T.max if reduction == "max" else T.min)(C[0], A[vi])

    return desc


def _across_impl(reduction: str, lanes: int):
    reducer = _ACROSS[reduction]
    with IRBuilder() as builder:
        with tb.prim_func(s_tir=True):
            tb.func_name("impl")
            handles = [tb.arg(n, tb.handle()) for n in ("a", "c")]
            A = tb.match_buffer(handles[0], (lanes,), "float32", offset_factor=1)
            C = tb.match_buffer(handles[1], (1,), "float32", offset_factor=1)
            with tb.sblock("root"):
                tb.reads(C[0], A[0:lanes])
                tb.writes(C[0])
                vector, width = A.vload([0], f"float32x{lanes}"), lanes
                while width > 1:
                    width //= 2
                    vector = reducer(tirx.Shuffle([vector], list(range(width))),
                                     tirx.Shuffle([vector], list(range(width, 2 * width))))
                tb.buffer_store(C, reducer(C[0], vector), [0])
    return builder.get()
