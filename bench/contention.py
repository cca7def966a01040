"""Latency when another busy process shares one of the cores: tvm_fuse, ONNX Runtime and
OpenVINO, with idle threads spinning between kernels (both runtimes' default) and sleeping
(`tvm_fuse.set_spinning(False)`, ONNX Runtime's `session.intra_op.allow_spinning` 0).

    python bench/contention.py [--models minilm_s128 squeezenet] [--repeat 40] [--threads N]

Each model is built once and exported; for each of "idle" (no other process) and "busy" (a
process spinning in a loop on the last core we may use), and each spinning setting, a fresh
process loads it and times the three runtimes taking turns (`time_alternating`): TVM fixes
its spinning when its first thread pool starts, so each setting needs its own process.
OpenVINO has no such setting and runs as shipped in every row.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import tvm_fuse
from tvm_fuse.benchmark import random_feed
from tvm_fuse.benchmarking.compare import OpenVINOSession, onnxruntime_session, time_alternating
from tvm_fuse.target import host_cores

from models import model_and_feed


def busy_loop(cpu: int) -> None:
    os.sched_setaffinity(0, {cpu})
    while True:
        pass


def time_once(model: str, library: str, spinning: bool, threads: int, repeat: int) -> dict:
    """In this (fresh) process: the three runtimes' median and p90 ms on `model`."""
    tvm_fuse.set_spinning(spinning)
    onnx_model, feed = model_and_feed(model, 1)
    ours = tvm_fuse.load(library)
    feed = feed or random_feed(ours.get_inputs())
    runtimes = {"tvm_fuse": ours, "onnxruntime": onnxruntime_session(onnx_model, threads, spinning),
                "openvino": OpenVINOSession(onnx_model, threads)}
    times = time_alternating(runtimes, feed, threads, repeat=repeat)
    return {name: {"median_ms": t.median_ms, "p90_ms": t.p90_ms} for name, t in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", default=["minilm_s128", "squeezenet"])
    parser.add_argument("--repeat", type=int, default=40, help="timed runs of each runtime per row (default 40)")
    parser.add_argument("--threads", type=int, default=host_cores(), help="for every runtime (default: all cores)")
    parser.add_argument("--child", nargs=3, metavar=("MODEL", "LIBRARY", "SPINNING"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        model, library, spinning = args.child
        print(json.dumps(time_once(model, library, spinning == "1", args.threads, args.repeat)))
        return
    busy_cpu = max(os.sched_getaffinity(0))
    print(f"{args.threads} threads; 'busy': another process spins on CPU {busy_cpu}; median (p90) ms")
    print(f"{'model':14}{'cores':>7}{'spinning':>10}{'tvm_fuse':>18}{'ONNX Runtime':>18}{'OpenVINO':>18}")
    with tempfile.TemporaryDirectory() as folder:
        for model in args.models:
            onnx_model, feed = model_and_feed(model, 1)
            shapes = {k: v.shape for k, v in feed.items()} if feed else None
            library = str(tvm_fuse.build(onnx_model, input_shapes=shapes).export(Path(folder) / f"{model}.so"))
            for cores in ("idle", "busy"):
                hog = None
                if cores == "busy":
                    hog = multiprocessing.Process(target=busy_loop, args=(busy_cpu,), daemon=True)
                    hog.start()
                try:
                    for spinning in (True, False):
                        out = subprocess.run([sys.executable, __file__, "--child", model, library, str(int(spinning)),
                                              "--repeat", str(args.repeat), "--threads", str(args.threads)],
                                             check=True, capture_output=True, text=True).stdout
                        times = json.loads(out.strip().splitlines()[-1])
                        cells = "".join(f"{t['median_ms']:>9.2f} ({t['p90_ms']:.1f})".rjust(18) for t in times.values())
                        print(f"{model:14}{cores:>7}{'yes' if spinning else 'no':>10}{cells}", flush=True)
                finally:
                    if hog is not None:
                        hog.terminate()
                        hog.join()


if __name__ == "__main__":
    main()
