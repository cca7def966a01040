"""The machine's measured fp32 FMA peak: the ceiling to read model GFLOP/s against.

`measure_peak` compiles a tiny TIR kernel with TVM and times it. Each of `num_threads` threads
(a `T.parallel` loop on TVM's thread pool) keeps ACC independent accumulators of one vector
register each (16 lanes on AVX-512, 8 on AVX2) and runs `acc = acc * x + y` on all of them,
`iterations` times: the only loop-carried dependency is per accumulator, so with ACC at least
latency x FMA ports (4 x 2 on current Xeons) the FMA units never wait. LLVM keeps the
accumulators in registers for the whole loop, so the hot loop is nothing but register-only
`vfmadd` (zmm on AVX-512, ymm on AVX2) and loop control. `measure_peak` checks that in the
generated assembly before it trusts the figure (`Peak.hot_loop` holds the loop), and raises
otherwise.

This is a real peak, not a lower bound: fp32 FLOP/s as 2 x FMA lanes, the best of a few runs
of about `duration` seconds each (wall clock). On a shared machine, best-of keeps the runs the
neighbour slowed least. Nothing is cached: each call compiles and measures afresh.
"""

from __future__ import annotations

import math
import re
import time
from dataclasses import dataclass

import numpy as np
import tvm
from tvm.script import tirx as T

from ..errors import TvmFuseError
from ..target import (
    host_cores,
    isa_features,
    missing_host_features,
    parse_target,
    target_string,
)
from ..threads import set_num_threads

# ISA -> (feature it needs, lanes, accumulators, register): the widest vector FMA the target
# has, and enough independent chains to hide its latency without spilling (32 zmm, 16 ymm).
_KERNELS = {
    "avx512": ("avx512f", 16, 16, "zmm"),
    "avx2": ("fma", 8, 12, "ymm"),
}


@dataclass(frozen=True)
class Peak:
    gflops: float  # all threads
    per_core_gflops: float  # gflops / threads
    isa: str  # "avx512" (zmm FMA) or "avx2" (ymm FMA)
    threads: int
    lanes: int
    accumulators: int
    seconds: float  # the best run
    flops: int  # of one run
    method: str  # one line: how the figure was obtained
    target: str
    hot_loop: str  # the kernel's inner loop, as assembly

    def to_json(self) -> dict:
        return dict(self.__dict__)


def _kernel(threads: int, acc: int, lanes: int):
    @T.prim_func
    def fma_peak(out: T.Buffer((threads, acc, lanes), "float32"), n: T.int32, x: T.float32, y: T.float32):
        T.func_attr({"global_symbol": "fma_peak", "tir.noalias": True})
        for t in T.parallel(threads):
            regs = T.alloc_buffer((acc, lanes), "float32", scope="local")
            for a in T.unroll(acc):
                for lane in T.vectorized(lanes):
                    regs[a, lane] = T.Cast("float32", a * lanes + lane)
            for _ in range(n):
                for a in T.unroll(acc):
                    for lane in T.vectorized(lanes):
                        regs[a, lane] = regs[a, lane] * x + y
            for a in T.unroll(acc):
                for lane in T.vectorized(lanes):
                    out[t, a, lane] = regs[a, lane]

    return fma_peak


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


def hot_loop(asm: str, register: str) -> str:
    """The innermost loop of `asm` with the most FMAs on `register` (zmm, ymm) registers; raises
    TvmFuseError unless it is register-only FMAs plus loop control (no loads, stores, spills)."""
    fma = re.compile(rf"^vfmadd\d+ps\s+%{register}\d+, %{register}\d+, %{register}\d+$")
    loops = innermost_loops(asm)
    if not loops:
        raise TvmFuseError("no loop found in the peak kernel's assembly")
    loop = max(loops, key=lambda ls: sum(bool(fma.match(line)) for line in ls))
    best = "\n".join(loop)
    body = [line for line in loop[1:] if line and not line.startswith(".")]
    fmas = [line for line in body if fma.match(line)]
    others = [line for line in body if not fma.match(line)]
    loop_control = re.compile(r"^(add|sub|inc|dec|cmp)[lq]?\s|^j\w+\s")
    if not fmas or any(not loop_control.match(line) for line in others):
        raise TvmFuseError(f"the peak kernel's hot loop is not register-only {register} FMAs:\n{best}")
    return best.strip()


def measure_peak(num_threads: int | None = None, target=None, duration: float = 0.05,
                 repeat: int = 5) -> Peak:
    """Measure the fp32 FMA peak over `num_threads` threads (default: one per core) with code
    compiled for `target` (default: this machine): the best of `repeat` runs of about
    `duration` seconds each. Sets TVM's thread pool to `num_threads` threads, as
    `set_num_threads` does."""
    threads = num_threads or host_cores()
    tvm_target = parse_target(target)
    features = isa_features(tvm_target)
    missing = missing_host_features(features)
    if missing:
        raise TvmFuseError(f"cannot measure a peak for a target this CPU cannot run (lacks {sorted(missing)})")
    isa = next((name for name, (feature, *_) in _KERNELS.items() if feature in features), None)
    if isa is None:
        raise TvmFuseError(f"the target has neither AVX-512 nor FMA: {target_string(tvm_target, brief=True)}")
    _, lanes, acc, register = _KERNELS[isa]

    executable = tvm.compile(tvm.IRModule({"fma_peak": _kernel(threads, acc, lanes)}), target=tvm_target)
    module = executable.mod
    asm = "\n".join(m.inspect_source("asm") for m in [module, *module.imports] if m.kind == "llvm")
    loop = hot_loop(asm, register)

    kernel = module["fma_peak"]
    out = tvm.runtime.tensor(np.zeros((threads, acc, lanes), "float32"))
    set_num_threads(threads)
    x, y = 0.999, 0.001  # acc -> y / (1 - x) = 1: no overflow, no denormals

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
    flops = 2 * threads * acc * lanes * iterations
    gflops = flops / best / 1e9
    if not (gflops > 0 and math.isfinite(gflops)):
        raise TvmFuseError(f"implausible peak {gflops} GFLOP/s")
    method = (f"TVM TIR kernel: {threads} thread(s) x {acc} independent {lanes}-lane {register} FMA "
              f"chains in registers, {iterations} iterations, best of {max(1, repeat)} runs of "
              f"~{best * 1e3:.0f} ms (wall clock); FLOPs = 2 x lanes x FMAs")
    return Peak(gflops, gflops / threads, isa, threads, lanes, acc, best, flops, method,
                target_string(tvm_target, brief=True), loop)
