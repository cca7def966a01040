"""Build times: tvm_fuse's build of each model (fp32, bf16, int8 on a calibration table made
beforehand, and a build-cache hit) beside OpenVINO's `compile_model` and ONNX Runtime's session
creation, each from the ONNX model in memory, in one process, one after another.

    python bench/build_times.py [--models resnet50 densenet121 ...] [--no-openvino] [--no-bf16] [--no-int8]
                                [--no-cache] [--phases] [--out bench/results]

A precision the host cannot build (bf16 without AVX512-BF16) is left out. `--phases` prints each
fp32 build's seconds per phase (`fusion_report()["build_seconds"]`). Ratios are ours over the
other's: below 1 we are faster. The geomean rows cover the CNNs of `bench/models.py`.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx

import tvm_fuse
from tvm_fuse import build_timings
from tvm_fuse.benchmark import random_feed
from tvm_fuse.benchmarking.compare import OpenVINOSession, onnxruntime_session
from tvm_fuse.calibrate import quantize

import tables
from models import CNNS, REAL_MODELS, model_and_feed

CALIBRATION_FEEDS = 4  # the table's samples; calibrating is not part of an int8 build here


def _seconds(work) -> tuple[float, object]:
    start = time.perf_counter()
    result = work()
    return time.perf_counter() - start, result


def measure(name: str, args) -> dict:
    model, feed = model_and_feed(name, 1)
    # A real model builds at the shapes of its own feed, as ONNX Runtime and OpenVINO run it.
    shapes = {k: v.shape for k, v in feed.items()} if feed is not None and name in REAL_MODELS else None
    data = model.SerializeToString()
    features = tvm_fuse.host_features()
    row = {"model": name}
    row["fp32"], built = _seconds(lambda: tvm_fuse.build(model, input_shapes=shapes))
    row["phases"] = built.fusion_report().get("build_seconds", {})
    if not args.no_bf16 and "avx512_bf16" in features:
        row["bf16"], _ = _seconds(lambda: tvm_fuse.build(model, input_shapes=shapes, precision="bf16"))
    if not args.no_int8 and features & {"avx2", "avx512bw"}:
        # A real model calibrates on its own feed: a random one may take a branch (Silero's
        # sample rate) that cannot run at the shapes it was built for.
        feeds = ([feed] if feed is not None and name in REAL_MODELS else
                 [random_feed(built.get_inputs(), np.random.default_rng(i)) for i in range(CALIBRATION_FEEDS)])
        table = quantize(model, feeds, input_shapes=shapes)
        row["int8"], _ = _seconds(lambda: tvm_fuse.build(model, input_shapes=shapes,
                                                         quantize=tvm_fuse.QuantConfig(calibration=table)))
    if not args.no_cache:
        with tempfile.TemporaryDirectory() as folder:
            tvm_fuse.build(model, input_shapes=shapes, cache_dir=folder)
            row["cache hit"], _ = _seconds(lambda: tvm_fuse.build(model, input_shapes=shapes, cache_dir=folder))
    row["onnxruntime"], _ = _seconds(lambda: onnxruntime_session(onnx.load_from_string(data), 2))
    if not args.no_openvino:
        try:
            row["openvino"], _ = _seconds(lambda: OpenVINOSession(onnx.load_from_string(data), 2))
        except RuntimeError as error:  # a model OpenVINO cannot convert: its cell stays empty
            print(f"{name}: OpenVINO failed: {str(error).strip().splitlines()[0]}")
    return row


def summary(rows: list[dict]) -> str:
    lines = []
    cnns = [r for r in rows if r["model"] in CNNS]
    for other in ("openvino", "onnxruntime"):
        mean = tables.geomean(r["fp32"] / r[other] for r in cnns if other in r)
        if mean is not None:
            lines.append(f"Geomean over the CNNs, our fp32 build / {other}: {mean:.1f}x.")
    for precision in ("bf16", "int8"):
        mean = tables.geomean(r[precision] / r["fp32"] for r in rows if precision in r)
        if mean is not None:
            lines.append(f"Geomean {precision} build / fp32 build: {mean:.2f}.")
    return " ".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", default=[*CNNS, *REAL_MODELS])
    parser.add_argument("--no-openvino", action="store_true")
    parser.add_argument("--no-bf16", action="store_true")
    parser.add_argument("--no-int8", action="store_true")
    parser.add_argument("--no-cache", action="store_true", help="leave out the cache hit")
    parser.add_argument("--phases", action="store_true", help="print each fp32 build's seconds per phase")
    parser.add_argument("--out", type=Path, default=tables.RESULTS, help="where build_times.json goes")
    args = parser.parse_args()
    rows = []
    for name in args.models:
        rows.append(measure(name, args))
        print({k: (round(v, 2) if isinstance(v, float) else v) for k, v in rows[-1].items() if k != "phases"}, flush=True)
        if args.phases:
            print(build_timings.table(rows[-1]["phases"]))
    text = summary(rows)
    print(tables.markdown(rows, tables.BUILD_TIMES) + "\n\n" + text)
    tables.save(args.out, "build_times", [{k: v for k, v in r.items() if k != "phases"} for r in rows],
                "python bench/build_times.py " + " ".join(sys.argv[1:]), summary=text)


if __name__ == "__main__":
    main()
