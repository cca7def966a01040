"""Time each kernel inside a real run of a model (not alone with warm or flushed caches):
TVM's VM calls an instrument before and after every kernel call, and the median over runs of
each call's wall time is reported, grouped by kernel. A kernel that computes ONNX Conv, Gemm or
MatMul nodes also gets its speed, 2 x the nodes' multiply-adds per second (the direct
computation's: a Winograd kernel's may pass the peak), and, unless it is a depthwise conv (no
product unit serves those), that speed's share of the measured peak of the unit its precision
runs on (`tvm_fuse.benchmarking.peak`, same thread count): a matrix kernel. What the run spends
outside the matrix kernels is summed apart.

    python bench/kernel_times.py resnet50 --runs 20 --top 15
    python bench/kernel_times.py resnet50 --int8    # calibrated on 16 random batches, as bench/models.py
    python bench/kernel_times.py minilm_s128 --dynamic   # dynamic int8, as bench/models.py's MiniLM rows
    python bench/kernel_times.py resnet50 --precision bf16
    python bench/kernel_times.py ppocr_rec          # a real model (bench/models.py), on its own feed
    python bench/kernel_times.py trueocr_rec --symbolic   # built with its dims symbolic, run on its feed
    python bench/kernel_times.py resnet50 mobilenet_v2 --precision fp32 bf16 int8 --threads 1 --save
                                                    # the tables of docs/benchmarks.md

The instrument itself (a Python call before and after each kernel) adds under a microsecond to
every call's figure, which a run without it, timed beside and printed last, shows: on one
thread (Zen 5) ResNet-50's kernels sum to within 1.5% of that run, MobileNetV2's (190 calls)
to 6-12% above it, most of it in the rest, whose many calls are each a few microseconds.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import defaultdict
from dataclasses import replace

import numpy as np
import onnx
import tvm

import tvm_fuse
from tvm_fuse.benchmark import random_feed
from tvm_fuse.benchmarking.flops import node_macs, tensor_shapes
from tvm_fuse.benchmarking.peak import UNITS, measure_peak
from tvm_fuse.explain import node_label
from tvm_fuse.frontend.fixups import apply_fixups
from tvm_fuse.frontend.importer import graph_inputs, set_input_shapes
from tvm_fuse.transform.realize.bf16 import PRECISIONS

import tables
from models import CALIBRATION_SEED, model_and_feed

TOP_SAVED = 8  # kernels saved per model and precision, by total time
SUMMARIES = 3  # rows after the kernels': the matrix kernels together, the rest, the run alone


def kernel_times(model: tvm_fuse.CompiledModel, runs: int, feed: dict | None = None,
                 warmup: int = 5) -> tuple[dict[str, list[float]], float]:
    """(kernel name -> the median milliseconds of each of its calls in a run on `feed` (None:
    random), the median milliseconds of a whole run without the instrument)."""
    machine, weights = model._machine()
    args = [tvm.runtime.tensor(v) for v in (feed or random_feed(model.get_inputs())).values()] + list(weights)
    for _ in range(warmup):
        machine["main"](*args)
    whole = []
    for _ in range(runs):
        start = time.perf_counter()
        machine["main"](*args)
        whole.append((time.perf_counter() - start) * 1e3)
    started: dict[str, float] = {}
    calls: list[tuple[str, float]] = []

    def instrument(_func, name, before, _result, *_args):
        now = time.perf_counter()
        if before:
            started[name] = now
        else:
            calls.append((name, now - started[name]))
        return 0  # VMInstrumentReturnKind: go on

    machine.set_instrument(instrument)
    per_position: dict[tuple[int, str], list[float]] = defaultdict(list)
    for _ in range(runs):
        calls.clear()
        machine["main"](*args)
        for position, (name, seconds) in enumerate(calls):
            per_position[(position, name)].append(seconds * 1e3)
    by_kernel: dict[str, list[float]] = defaultdict(list)
    for (_, name), times in per_position.items():
        by_kernel[name].append(float(np.median(times)))
    return by_kernel, float(np.median(whole))


DEPTHWISE = "depthwise"  # a kernel's "precision" when it is a depthwise conv: no product unit, no peak


def _depthwise(node: onnx.NodeProto, shapes: dict) -> bool:
    group = next((a.i for a in node.attribute if a.name == "group"), 1)
    return node.op_type == "Conv" and group > 1 and group == shapes[node.input[0]][1]


def kernel_ops(model: tvm_fuse.CompiledModel, source: onnx.ModelProto,
               input_shapes: dict | None = None) -> dict[str, tuple[int, str]]:
    """Kernel name -> (2 x the multiply-adds of the ONNX Conv, Gemm and MatMul nodes its calls
    compute in a run, its precision, or `DEPTHWISE`), for the kernels that compute any.
    `input_shapes`: the run's, for a model with symbolic dims (its shape arithmetic folded as
    bench/models.py folds it)."""
    shapes = tensor_shapes(apply_fixups(set_input_shapes(source, input_shapes)) if input_shapes else source)
    nodes = {node_label(node, i): node for i, node in enumerate(source.graph.node)}
    found: dict[str, tuple[int, str]] = {}
    for kernel in model.fusion_report()["kernels"]:
        computed = [nodes[label] for label in kernel["onnx_nodes"] if label in nodes]
        ops = 2 * sum(node_macs(node, shapes) for node in computed)
        if ops:
            total, _ = found.get(kernel["name"], (0, ""))
            convs = [node for node in computed if node.op_type == "Conv"]
            depthwise = bool(convs) and all(_depthwise(node, shapes) for node in convs)
            found[kernel["name"]] = total + ops, DEPTHWISE if depthwise else kernel.get("precision", "fp32")
    return found


def _measure_peaks(measured: dict[str, float], precisions, threads: int) -> None:
    """Add to `measured` the GOP/s of the unit each of `precisions` runs on here (AMX's where
    the host has it), once per precision and only where this host has such a unit."""
    features = tvm_fuse.host_features()
    for precision in set(precisions) - measured.keys():
        if any(unit.feature in features for unit in UNITS[precision]):
            measured[precision] = measure_peak(threads, precision=precision).gflops


def table(name: str, label: str, threads: int, times: dict[str, list[float]], run_ms: float, ops: dict,
          peaks: dict) -> list[dict]:
    """Rows of every kernel, by total time, then `SUMMARIES`: the matrix kernels together, the
    rest, and the run without the instrument (`run_ms`)."""
    total = sum(sum(t) for t in times.values())
    rows = []
    for kernel, t in sorted(times.items(), key=lambda kv: -sum(kv[1])):
        row = {"model": name, "precision": label, "threads": threads, "kernel": kernel, "calls": len(t),
               "ms": sum(t), "share": sum(t) / total}
        if kernel in ops:
            count, precision = ops[kernel]
            row["gops"] = count / sum(t) / 1e6
            row["of_peak"] = row["gops"] / peaks[precision] if precision in peaks else None
        rows.append(row)
    matrix = [r for r in rows if "gops" in r and ops[r["kernel"]][1] != DEPTHWISE]
    matrix_ms = sum(r["ms"] for r in matrix)
    matrix_ops = sum(ops[r["kernel"]][0] for r in matrix)
    summary = {"model": name, "precision": label, "threads": threads, "calls": sum(r["calls"] for r in matrix)}
    together = {**summary, "kernel": "(matrix kernels)", "ms": matrix_ms, "share": matrix_ms / total,
                "gops": matrix_ops / matrix_ms / 1e6 if matrix_ms else None}
    if matrix and all(ops[r["kernel"]][1] in peaks for r in matrix):  # the time at the peaks over the time taken
        at_peak_ms = sum(ops[r["kernel"]][0] / peaks[ops[r["kernel"]][1]] / 1e6 for r in matrix)
        together["of_peak"] = at_peak_ms / matrix_ms
    rest = {**summary, "kernel": "(the rest)", "calls": sum(r["calls"] for r in rows) - summary["calls"],
            "ms": total - matrix_ms, "share": 1 - matrix_ms / total}
    alone = {**summary, "kernel": "(run without the instrument)", "calls": None, "ms": run_ms, "share": run_ms / total}
    return rows + [together, rest, alone]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("models", nargs="+", help="named models (resnet50, ppocr_rec, a corpus model, ...) or .onnx paths")
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--batch", type=int, default=1, help="the batch of a named model's feed")
    parser.add_argument("--top", type=int, default=15, help="kernels to list, by total time")
    parser.add_argument("--threads", type=int, default=None, help="threads per kernel (default: one per core)")
    parser.add_argument("--int8", action="store_true", help="the same as --precision int8")
    parser.add_argument("--dynamic", action="store_true",
                        help="build in int8 with QuantConfig(activations='dynamic'): no calibration (transformers)")
    parser.add_argument("--precision", nargs="+", choices=[*PRECISIONS, "int8"], default=["fp32"],
                        help="build(precision=...), or int8: calibrated (entropy) on 16 random batches as "
                             "bench/models.py --int8; several: one build after another")
    parser.add_argument("--symbolic", action="store_true",
                        help="build with the model's dims as it declares them, not at its feed's shapes "
                             "(as bench/corpus.py --symbolic), then run the feed")
    parser.add_argument("--save", action="store_true",
                        help=f"write the top {TOP_SAVED} kernels of each build and the sums to bench/results/kernel_times.json")
    args = parser.parse_args()
    precisions = ["int8"] if args.int8 else args.precision
    threads = args.threads or tvm_fuse.target.host_cores()
    tvm_fuse.set_num_threads(threads)
    saved, measured = [], {}
    for name in args.models:
        source, feed = (onnx.load(name), None) if name.endswith(".onnx") else model_and_feed(name, args.batch)
        shapes = {key: value.shape for key, value in feed.items()} if feed else None
        for precision in precisions:
            quantize = tvm_fuse.QuantConfig(activations="dynamic") if args.dynamic else None
            if precision == "int8":
                inputs = graph_inputs(set_input_shapes(source, shapes) if shapes else source)
                samples = [random_feed(inputs, np.random.default_rng((CALIBRATION_SEED, i))) for i in range(16)]
                quantize = tvm_fuse.QuantConfig(calibration=samples)
            model = tvm_fuse.build(source, quantize=quantize, input_shapes=None if args.symbolic else shapes,
                                   precision="fp32" if precision == "int8" else precision)
            ops = kernel_ops(model, source, shapes)
            label = "dynamic int8" if args.dynamic else precision
            _measure_peaks(measured, [p for _, p in ops.values() if p != DEPTHWISE], threads)
            times, run_ms = kernel_times(model, args.runs, feed)
            rows = table(name, label, threads, times, run_ms, ops, measured)
            kernels, summaries = rows[:-SUMMARIES], rows[-SUMMARIES:]
            print(f"{name} {label}, {threads} thread(s): kernels sum to {sum(r['ms'] for r in kernels):.2f} ms "
                  f"per run; a run without the instrument takes {run_ms:.2f} ms")
            print(tables.markdown(kernels[:args.top] + summaries, replace(tables.KERNEL_TIMES, note="")))
            saved += kernels[:TOP_SAVED] + summaries
    print(tables.KERNEL_TIMES.note)
    peaks = ", ".join(f"{precision} {gops:.0f} GOP/s" for precision, gops in sorted(measured.items()))
    summary = f"The units' peaks, measured in the same run on {threads} thread(s): {peaks}." if peaks else ""
    print(summary)
    if args.save:
        tables.save(tables.RESULTS, "kernel_times", saved, "python bench/kernel_times.py " + " ".join(sys.argv[1:]),
                    summary=summary)


if __name__ == "__main__":
    main()
