"""The u8 x s8 -> s32 dot products our int8 kernels are tensorized with: a `lanes` x 4 block
`acc[i] += sum_k data[k] * weight[i, k]`, 4 input bytes broadcast against 4 x `lanes` weight
bytes, for 16 lanes (zmm) and 8 (ymm: output channels in blocks of 8, e.g. 24 channels).
TVM registers the same products (`dot_16x4_vnni`) for a global accumulator; ours accumulate
in a register tile (`local` scope), which is what the kernels' `cache_write` makes."""

from __future__ import annotations

from tvm.s_tir import TensorIntrin
from tvm.script import tirx as T

# (vpdpbusd, vpmaddubsw, vpmaddwd) by lanes: LLVM's x86 intrinsics for zmm and ymm.
_LLVM = {16: ("llvm.x86.avx512.vpdpbusd.512", "llvm.x86.avx512.pmaddubs.w.512", "llvm.x86.avx512.pmaddw.d.512"),
         8: ("llvm.x86.avx512.vpdpbusd.256", "llvm.x86.avx2.pmadd.ub.sw", "llvm.x86.avx2.pmadd.wd")}


def dot_product(lanes: int, vnni: bool) -> str:
    """The registered name of the `lanes` x 4 dot product, with VNNI or without."""
    return f"tvm_fuse.dot_{lanes}x4_u8s8s32_{'vnni' if vnni else 'avx512'}"


def _register(lanes: int) -> None:
    vpdpbusd, pmaddubsw, pmaddwd = _LLVM[lanes]
    acc, bytes_, pairs = f"int32x{lanes}", f"uint8x{4 * lanes}", f"int16x{2 * lanes}"

    @T.prim_func(s_tir=True)
    def desc(
        A: T.Buffer((4,), "uint8", offset_factor=1),
        B: T.Buffer((lanes, 4), "int8", offset_factor=1),
        C: T.Buffer((lanes,), "int32", offset_factor=1, scope="local"),
    ) -> None:
        with T.sblock("root"):
            T.reads(C[0:lanes], A[0:4], B[0:lanes, 0:4])
            T.writes(C[0:lanes])
            for i in T.serial(0, lanes):
                for k in T.serial(0, 4):
                    with T.sblock("update"):
                        vi, vk = T.axis.remap("SR", [i, k])
                        C[vi] = C[vi] + T.cast(A[vk], "int32") * T.cast(B[vi, vk], "int32")

    @T.prim_func(s_tir=True)
    def vnni(
        A: T.Buffer((4,), "uint8", offset_factor=1),
        B: T.Buffer((lanes, 4), "int8", offset_factor=1),
        C: T.Buffer((lanes,), "int32", offset_factor=1, scope="local"),
    ) -> None:
        with T.sblock("root"):
            T.reads(C[0:lanes], A[0:4], B[0:lanes, 0:4])
            T.writes(C[0:lanes])
            word = T.reinterpret(A.vload([0], "uint8x4"), dtype="int32")
            C[T.ramp(T.int32(0), 1, lanes)] = T.call_llvm_pure_intrin(
                T.llvm_lookup_intrinsic_id(vpdpbusd),
                C.vload([0], dtype=acc),
                T.reinterpret(T.broadcast(word, lanes), dtype=bytes_),  # LLVM 22 takes bytes
                B.vload([0, 0], dtype=f"int8x{4 * lanes}"),
                dtype=acc,
            )

    @T.prim_func(s_tir=True)
    def avx512(
        A: T.Buffer((4,), "uint8", offset_factor=1),
        B: T.Buffer((lanes, 4), "int8", offset_factor=1),
        C: T.Buffer((lanes,), "int32", offset_factor=1, scope="local"),
    ) -> None:
        with T.sblock("root"):
            T.reads(C[0:lanes], A[0:4], B[0:lanes, 0:4])
            T.writes(C[0:lanes])
            word = T.reinterpret(A.vload([0], "uint8x4"), dtype="int32")
            # Pairs of u8 x s8 products summed in int16 (saturating), then pairs of those in s32.
            summed = T.call_llvm_pure_intrin(
                T.llvm_lookup_intrinsic_id(pmaddubsw),
                T.reinterpret(T.broadcast(word, lanes), dtype=bytes_),
                B.vload([0, 0], dtype=f"int8x{4 * lanes}"),
                dtype=pairs,
            )
            C[T.ramp(T.int32(0), 1, lanes)] = C.vload([0], dtype=acc) + T.call_llvm_pure_intrin(
                T.llvm_lookup_intrinsic_id(pmaddwd), summed, T.broadcast(T.int16(1), 2 * lanes), dtype=acc)

    TensorIntrin.register(dot_product(lanes, True), desc, vnni)
    TensorIntrin.register(dot_product(lanes, False), desc, avx512)


for _lanes in _LLVM:
    _register(_lanes)
