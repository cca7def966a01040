"""The machine's measured peaks: the ceilings to read a model's or a kernel's speed against.

`measure_peak` compiles a tiny TIR kernel with TVM and times it. Each of `num_threads` threads
(a `T.parallel` loop on TVM's thread pool) keeps ACC independent accumulators of one vector
register each (16 lanes on AVX-512, 8 on AVX2) and runs one product instruction on all of them,
`iterations` times: the only loop-carried dependency is per accumulator, so with ACC at least
latency x ports the unit never waits. The product is that of the unit a precision runs on
(`UNITS`): fp32 `vfmadd` (AVX-512, else AVX2), int8 `vpdpbusd` (AVX512-VNNI) or bf16
`vdpbf16ps` (AVX512-BF16), or on AMX `tdpbusd` / `tdpbf16ps` on 2 x 2 C tiles. LLVM keeps the
accumulators in registers for the whole loop, so the hot loop is nothing but register-only
products and loop control. `measure_peak` checks that in the
generated assembly before it trusts the figure (`Peak.hot_loop` holds the loop), and raises
otherwise.

This is a real peak, not a lower bound: operations per second as 2 x the multiply-adds (fp32
FLOP/s, or int8 / bf16 OP/s), the best of a few runs of about `duration` seconds each (wall
clock). On a shared machine, best-of keeps the runs the neighbour slowed least. Nothing is
cached: each call compiles and measures afresh.
"""

from __future__ import annotations

import math
import re
import time
from dataclasses import dataclass

import numpy as np
import tvm
from tvm.script import tirx as T

from ..amx import AMX_COLUMNS, AMX_ROWS
from ..compute.dense_int8 import LLVM_INTRINSICS
from ..errors import TvmFuseError
from ..schedules.amx.machine import BF16, INT8
from ..schedules.intrinsics import bf16_llvm
from ..target import (
    host_cores,
    isa_features,
    missing_host_features,
    parse_target,
    target_string,
)
from ..threads import set_num_threads


@dataclass(frozen=True)
class Unit:
    """A product instruction the peak kernel keeps busy: what it needs and what it does."""

    isa: str
    feature: str  # the ISA feature (`target.ISA_FEATURES`) it needs
    lanes: int  # 32-bit accumulator lanes per register (an AMX C tile: 16 x 16)
    accumulators: int  # independent chains: enough to hide its latency without spilling
    register: str
    mnemonic: str  # a regular expression of the instruction, as the assembly spells it
    ops: int  # operations per instruction: 2 per multiply-add


TILE = AMX_ROWS * AMX_COLUMNS  # accumulator lanes of an AMX C tile

# Precision -> the units it may run on, the widest first. AMX: 2 x 2 C tiles (the other four
# registers hold two A and two B tiles), each product a C tile += an A tile x a B tile.
UNITS = {
    "fp32": [Unit("avx512", "avx512f", 16, 16, "zmm", r"vfmadd\d+ps", 2 * 16),
             Unit("avx2", "fma", 8, 12, "ymm", r"vfmadd\d+ps", 2 * 8)],
    "int8": [Unit("amx_int8", "amx", TILE, 4, "tmm", "tdpbusd", 2 * TILE * INT8.depth),
             Unit("avx512_vnni", "avx512_vnni", 16, 16, "zmm", "vpdpbusd", 2 * 16 * 4)],
    "bf16": [Unit("amx_bf16", "amx_bf16", TILE, 4, "tmm", "tdpbf16ps", 2 * TILE * BF16.depth),
             Unit("avx512_bf16", "avx512_bf16", 16, 16, "zmm", "vdpbf16ps", 2 * 16 * 2)],
}


@dataclass(frozen=True)
class Peak:
    gflops: float  # giga-operations per second (FLOP/s in fp32), all threads
    per_core_gflops: float  # gflops / threads
    isa: str  # the unit's name (`Unit.isa`): avx512 or avx2 (fp32 FMA), avx512_vnni, avx512_bf16, amx_int8, amx_bf16
    threads: int
    lanes: int
    accumulators: int
    seconds: float  # the best run
    flops: int  # operations of one run
    method: str  # one line: how the figure was obtained
    target: str
    hot_loop: str  # the kernel's inner loop, as assembly
    precision: str = "fp32"

    def to_json(self) -> dict:
        return dict(self.__dict__)


def _dtype(unit: Unit) -> str:
    return "int32" if unit.feature in ("avx512_vnni", "amx") else "float32"


def _tile_kernel(unit: Unit, threads: int):
    """The AMX peak kernel: each thread configures 8 tiles of 16 rows of 64 bytes, loads its A
    tiles with the word `x` and its B tiles with `y`, and runs `n` rounds of the 2 x 2 products."""
    kind = INT8 if unit.feature == "amx" else BF16
    row_bytes, dtype = AMX_COLUMNS * 4, _dtype(unit)

    def tile(name, *args):
        return T.call_llvm_intrin("void", name, *args)

    def register(number):
        return T.Cast("int8", number)

    @T.prim_func
    def peak(out: T.Buffer((threads, 4, TILE), dtype), n: T.int32, x: T.int32, y: T.int32):
        T.func_attr({"global_symbol": "peak", "tir.noalias": True})
        for t in T.parallel(threads):
            config = T.alloc_buffer((64,), "uint8", scope="local")
            words = T.alloc_buffer((2, TILE), "int32", scope="local")
            for i in range(64):  # palette 1; from byte 16 each tile's bytes per row, from 48 its rows
                config[i] = T.uint8(0)
            config[0] = T.uint8(1)
            for r in T.unroll(8):
                config[16 + 2 * r] = T.uint8(row_bytes)
                config[48 + r] = T.uint8(AMX_ROWS)
            for i in range(TILE):
                words[0, i] = x
                words[1, i] = y
            T.evaluate(tile("llvm.x86.ldtilecfg", config.access_ptr("r")))
            for c in T.unroll(4):
                T.evaluate(tile("llvm.x86.tilezero", register(c)))
            for r in T.unroll(4):  # A tiles 4 and 5 of x, B tiles 6 and 7 of y
                T.evaluate(tile("llvm.x86.tileloadd64", register(4 + r), words.access_ptr("r", offset=r // 2 * TILE),
                                T.int64(row_bytes)))
            for _ in range(n):
                for c in T.unroll(4):
                    T.evaluate(tile(kind.instruction, register(c), register(4 + c // 2), register(6 + c % 2)))
            for c in T.unroll(4):
                T.evaluate(tile("llvm.x86.tilestored64", register(c), out.access_ptr("w", offset=(t * 4 + c) * TILE),
                                T.int64(row_bytes)))
            T.evaluate(tile("llvm.x86.tilerelease"))

    return peak


def _kernel(unit: Unit, threads: int):
    """The peak kernel of `unit`: `out[t]` = the accumulators of thread `t` after `n` products
    with the scalars `x` and `y` (broadcast; the loop cannot fold them)."""
    if unit.register == "tmm":
        return _tile_kernel(unit, threads)
    acc, lanes = unit.accumulators, unit.lanes
    dtype = _dtype(unit)
    vector = f"{dtype}x{lanes}"
    if unit.feature == "avx512_vnni":
        vpdpbusd = LLVM_INTRINSICS[lanes][0]

        def product(regs, a, x, y):
            return T.call_llvm_pure_intrin(T.llvm_lookup_intrinsic_id(vpdpbusd), regs.vload([a, 0], dtype=vector),
                                           T.reinterpret(T.broadcast(x, lanes), dtype=f"uint8x{4 * lanes}"),
                                           T.reinterpret(T.broadcast(y, lanes), dtype=f"int8x{4 * lanes}"), dtype=vector)
        llvm_ir = ""
    elif unit.feature == "avx512_bf16":
        function, llvm_ir = bf16_llvm(lanes, native=True)

        def product(regs, a, x, y):
            return T.call_pure_extern(vector, function, regs.vload([a, 0], dtype=vector),
                                      T.broadcast(x, lanes), T.broadcast(y, lanes))
    else:
        llvm_ir = ""

        def product(regs, a, x, y):
            return regs.vload([a, 0], dtype=vector) * T.broadcast(T.reinterpret(x, dtype="float32"), lanes) \
                + T.broadcast(T.reinterpret(y, dtype="float32"), lanes)

    @T.prim_func
    def peak(out: T.Buffer((threads, acc, lanes), dtype), n: T.int32, x: T.int32, y: T.int32):
        T.func_attr({"global_symbol": "peak", "tir.noalias": True})
        for t in T.parallel(threads):
            with T.attr(0, "pragma_import_llvm", llvm_ir):
                regs = T.alloc_buffer((acc, lanes), dtype, scope="local")
                for a in T.unroll(acc):
                    for lane in T.vectorized(lanes):
                        regs[a, lane] = T.Cast(dtype, a * lanes + lane)
                for _ in range(n):
                    for a in T.unroll(acc):
                        regs[a, T.ramp(0, 1, lanes)] = product(regs, a, x, y)
                for a in T.unroll(acc):
                    for lane in T.vectorized(lanes):
                        out[t, a, lane] = regs[a, lane]

    return peak


def innermost_loops(asm: str) -> list[list[str]]:
    """Each innermost loop of `asm` as its stripped lines: a label, then no other label
    before a jump back to it."""
    lines = [line.strip() for line in asm.splitlines()]
    loops = []
    for first, line in enumerate(lines):
        if line.startswith(".LBB") and line.endswith(":"):
            label = line[:-1]
            for last in range(first + 1, len(lines)):
                if lines[last].startswith(".LBB") and lines[last].endswith(":"):
                    break
                if re.match(rf"^j\w+\s+{re.escape(label)}$", lines[last]):
                    loops.append(lines[first:last + 1])
                    break
    return loops


def hot_loop(asm: str, register: str, mnemonic: str = r"vfmadd\d+ps") -> str:
    """The innermost loop of `asm` with the most `mnemonic` instructions on `register` (zmm,
    ymm, tmm) registers; raises TvmFuseError unless it is register-only products plus loop
    control (no loads, stores, spills but the loop counter's)."""
    product = re.compile(rf"^{mnemonic}\s+%{register}\d+, %{register}\d+, %{register}\d+$")
    loops = innermost_loops(asm)
    if not loops:
        raise TvmFuseError("no loop found in the peak kernel's assembly")
    loop = max(loops, key=lambda ls: sum(bool(product.match(line)) for line in ls))
    best = "\n".join(loop)
    body = [line for line in loop[1:] if line and not line.startswith(".")]
    products = [line for line in body if product.match(line)]
    others = [line for line in body if not product.match(line)]
    # Loop control, the counter kept in a general register or on the stack.
    loop_control = re.compile(r"^(add|sub|inc|dec|cmp)[lq]?\s|^j\w+\s|^mov[lq]\s+(-?\d*\(%rsp\), %\w+|%\w+, -?\d*\(%rsp\))$")
    if not products or any(not loop_control.match(line) for line in others):
        raise TvmFuseError(f"the peak kernel's hot loop is not register-only {register} {mnemonic}:\n{best}")
    return best.strip()


def compiled_kernel(unit: Unit, threads: int, target: tvm.target.Target) -> tuple[tvm.runtime.Function, str]:
    """`unit`'s peak kernel compiled for `target`, and its hot loop (`hot_loop`: checked)."""
    module = tvm.compile(tvm.IRModule({"peak": _kernel(unit, threads)}), target=target).mod
    asm = "\n".join(m.inspect_source("asm") for m in [module, *module.imports] if m.kind == "llvm")
    return module["peak"], hot_loop(asm, unit.register, unit.mnemonic)


# The kernel's scalars, as int32 bits: fp32 acc -> y / (1 - x) = 1 (no overflow, no denormals);
# bf16 pairs of 2^-20, whose products a run sums to well under fp32's range; int8 wraps around.
_OPERANDS = {"fp32": (np.float32(0.999).view(np.int32), np.float32(0.001).view(np.int32)),
             "bf16": (0x35803580, 0x35803580), "int8": (0x01010101, 0x01010101)}


def measure_peak(num_threads: int | None = None, target=None, duration: float = 0.05,
                 repeat: int = 5, precision: str = "fp32") -> Peak:
    """Measure the peak of the unit `precision` runs on (`UNITS`) over `num_threads` threads
    (default: one per core) with code compiled for `target` (default: this machine): the best
    of `repeat` runs of about `duration` seconds each. Sets TVM's thread pool to `num_threads`
    threads, as `set_num_threads` does."""
    threads = num_threads or host_cores()
    tvm_target = parse_target(target)
    features = isa_features(tvm_target)
    missing = missing_host_features(features)
    if missing:
        raise TvmFuseError(f"cannot measure a peak for a target this CPU cannot run (lacks {sorted(missing)})")
    unit = next((unit for unit in UNITS[precision] if unit.feature in features), None)
    if unit is None:
        needs = " or ".join(unit.feature for unit in UNITS[precision])
        raise TvmFuseError(f"the target has no {precision} unit ({needs}): {target_string(tvm_target, brief=True)}")

    kernel, loop = compiled_kernel(unit, threads, tvm_target)
    out = tvm.runtime.tensor(np.zeros((threads, unit.accumulators, unit.lanes), _dtype(unit)))
    set_num_threads(threads)
    x, y = (int(value) for value in _OPERANDS[precision])

    def run(iterations: int) -> float:
        start = time.perf_counter()
        kernel(out, iterations, x, y)
        return time.perf_counter() - start

    run(1000)  # wakes the thread pool
    calibration = 200_000
    while (seconds := run(calibration)) < duration / 4:
        calibration *= 4
    iterations = min(max(1, int(calibration * duration / seconds)), 2**31 - 1)  # n is an int32
    best = min(run(iterations) for _ in range(max(1, repeat)))
    if not np.all(np.isfinite(out.numpy())):
        raise TvmFuseError("the peak kernel produced non-finite values")
    ops = unit.ops * threads * unit.accumulators * iterations
    gops = ops / best / 1e9
    if not (gops > 0 and math.isfinite(gops)):
        raise TvmFuseError(f"implausible peak {gops} GOP/s")
    method = (f"TVM TIR kernel: {threads} thread(s) x {unit.accumulators} independent {unit.lanes}-lane "
              f"{unit.register} {unit.mnemonic.replace(chr(92) + 'd+', '')} chains in registers, {iterations} "
              f"iterations, best of {max(1, repeat)} runs of ~{best * 1e3:.0f} ms (wall clock); "
              f"{unit.ops} operations per instruction (2 per multiply-add)")
    return Peak(gops, gops / threads, unit.isa, threads, unit.lanes, unit.accumulators, best, ops, method,
                target_string(tvm_target, brief=True), loop, precision)
