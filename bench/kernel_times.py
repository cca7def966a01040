"""Time each kernel inside a real run of a model (not alone with warm or flushed caches):
TVM's VM calls an instrument before and after every kernel call, and the median over runs of
each call's wall time is reported, grouped by kernel.

    python bench/kernel_times.py resnet50 --runs 20 --top 15
    python bench/kernel_times.py resnet50 --int8    # calibrated on 16 random batches, as bench/models.py
    python bench/kernel_times.py minilm_s128 --dynamic   # dynamic int8, as bench/models.py's MiniLM rows
    python bench/kernel_times.py resnet50 --precision bf16
    python bench/kernel_times.py ppocr_rec          # a real model (bench/models.py), on its own feed

Python's clock around each call adds a few microseconds to every figure.
"""

from __future__ import annotations

import argparse
import time
from collections import defaultdict

import numpy as np
import onnx
import tvm

import tvm_fuse
from tvm_fuse.benchmark import random_feed
from tvm_fuse.frontend.importer import graph_inputs
from tvm_fuse.transform.realize.bf16 import PRECISIONS

from models import CALIBRATION_SEED, model_and_feed


def kernel_times(model: tvm_fuse.CompiledModel, runs: int, feed: dict | None = None,
                 warmup: int = 5) -> dict[str, list[float]]:
    """Kernel name -> the median milliseconds of each of its calls in a run on `feed` (None: random)."""
    machine, weights = model._machine()
    args = [tvm.runtime.tensor(v) for v in (feed or random_feed(model.get_inputs())).values()] + list(weights)
    for _ in range(warmup):
        machine["main"](*args)
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
    return by_kernel


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", help="a named model (resnet50, ppocr_rec, a corpus model, ...) or an .onnx path")
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--batch", type=int, default=1, help="the batch of a named model's feed")
    parser.add_argument("--top", type=int, default=15, help="kernels to list, by total time")
    parser.add_argument("--int8", action="store_true",
                        help="build in int8, calibrated (entropy) on 16 random batches as bench/models.py --int8")
    parser.add_argument("--dynamic", action="store_true",
                        help="build in int8 with QuantConfig(activations='dynamic'): no calibration (transformers)")
    parser.add_argument("--precision", choices=PRECISIONS, default="fp32", help="build(precision=...)")
    args = parser.parse_args()
    source, feed = (onnx.load(args.model), None) if args.model.endswith(".onnx") else model_and_feed(args.model, args.batch)
    shapes = {name: value.shape for name, value in feed.items()} if feed else None
    quantize = tvm_fuse.QuantConfig(activations="dynamic") if args.dynamic else None
    if args.int8:
        inputs = graph_inputs(source)
        samples = [random_feed(inputs, np.random.default_rng((CALIBRATION_SEED, i))) for i in range(16)]
        quantize = tvm_fuse.QuantConfig(calibration=samples)
    model = tvm_fuse.build(source, quantize=quantize, input_shapes=shapes, precision=args.precision)
    times = kernel_times(model, args.runs, feed)
    total = sum(sum(t) for t in times.values())
    print(f"{args.model}: kernels sum to {total:.2f} ms per run")
    print(f"{'total ms':>9} {'share':>6} {'calls':>5} {'ms/call':>8}  kernel")
    for name, t in sorted(times.items(), key=lambda kv: -sum(kv[1]))[:args.top]:
        print(f"{sum(t):9.3f} {100 * sum(t) / total:5.1f}% {len(t):5d} {np.mean(t):8.3f}  {name}")


if __name__ == "__main__":
    main()
