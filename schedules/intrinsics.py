"""The u8 x s8 -> s32 dot products our int8 kernels are tensorized with: a 16 x 4 block
`acc[i] += sum_k data[k] * weight[i, k]`, 4 input bytes broadcast against 64 weight bytes.
TVM registers the same products (`dot_16x4_vnni`) for a global accumulator; ours accumulate
in a register tile (`local` scope), which is what the kernels' `cache_write` makes."""

from __future__ import annotations

from tvm.s_tir import TensorIntrin
from tvm.script import tirx as T

VNNI_DOT = "tvm_fuse.dot_16x4_u8s8s32_vnni"
AVX512_DOT = "tvm_fuse.dot_16x4_u8s8s32_avx512"


@T.prim_func(s_tir=True)
def _dot_desc(
    A: T.Buffer((4,), "uint8", offset_factor=1),
    B: T.Buffer((16, 4), "int8", offset_factor=1),
    C: T.Buffer((16,), "int32", offset_factor=1, scope="local"),
) -> None:
    with T.sblock("root"):
        T.reads(C[0:16], A[0:4], B[0:16, 0:4])
        T.writes(C[0:16])
        for i in T.serial(0, 16):
            for k in T.serial(0, 4):
                with T.sblock("update"):
                    vi, vk = T.axis.remap("SR", [i, k])
                    C[vi] = C[vi] + T.cast(A[vk], "int32") * T.cast(B[vi, vk], "int32")


@T.prim_func(s_tir=True)
def _dot_vnni(
    A: T.Buffer((4,), "uint8", offset_factor=1),
    B: T.Buffer((16, 4), "int8", offset_factor=1),
    C: T.Buffer((16,), "int32", offset_factor=1, scope="local"),
) -> None:
    with T.sblock("root"):
        T.reads(C[0:16], A[0:4], B[0:16, 0:4])
        T.writes(C[0:16])
        word = T.reinterpret(A.vload([0], "uint8x4"), dtype="int32")
        C[T.ramp(T.int32(0), 1, 16)] = T.call_llvm_pure_intrin(
            T.llvm_lookup_intrinsic_id("llvm.x86.avx512.vpdpbusd.512"),
            C.vload([0], dtype="int32x16"),
            T.reinterpret(T.broadcast(word, 16), dtype="uint8x64"),  # LLVM 22 takes bytes
            B.vload([0, 0], dtype="int8x64"),
            dtype="int32x16",
        )


@T.prim_func(s_tir=True)
def _dot_avx512(
    A: T.Buffer((4,), "uint8", offset_factor=1),
    B: T.Buffer((16, 4), "int8", offset_factor=1),
    C: T.Buffer((16,), "int32", offset_factor=1, scope="local"),
) -> None:
    with T.sblock("root"):
        T.reads(C[0:16], A[0:4], B[0:16, 0:4])
        T.writes(C[0:16])
        word = T.reinterpret(A.vload([0], "uint8x4"), dtype="int32")
        # Pairs of u8 x s8 products summed in int16 (saturating), then pairs of those in s32.
        pairs = T.call_llvm_pure_intrin(
            T.llvm_lookup_intrinsic_id("llvm.x86.avx512.pmaddubs.w.512"),
            T.reinterpret(T.broadcast(word, 16), dtype="uint8x64"),
            B.vload([0, 0], dtype="int8x64"),
            dtype="int16x32",
        )
        C[T.ramp(T.int32(0), 1, 16)] = C.vload([0], dtype="int32x16") + T.call_llvm_pure_intrin(
            T.llvm_lookup_intrinsic_id("llvm.x86.avx512.pmaddw.d.512"), pairs, T.int16x32(1), dtype="int32x16")


TensorIntrin.register(VNNI_DOT, _dot_desc, _dot_vnni)
TensorIntrin.register(AVX512_DOT, _dot_desc, _dot_avx512)
