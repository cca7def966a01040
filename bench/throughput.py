"""Throughput and memory: many batch-1 requests at once on all the cores, tvm_fuse's streams
(`CompiledModel.run_async`, one per core by default) beside OpenVINO's THROUGHPUT hint (its own
streams and infer requests) and ONNX Runtime (one session on one thread per stream, that many
threads calling it at once), in fp32 and, where the host has them, bf16 (OpenVINO's bf16 hint;
ONNX Runtime has none) and int8 (all calibrated on the same seeded random feeds: tvm_fuse's
table, ONNX Runtime's static QDQ model, NNCF for OpenVINO). Each runtime serves in a process of
its own that imports it alone (`bench/serving.py`), started fresh for each round, whose peak
resident memory is the serving figure; ours loads the exported library with TVM's runtime
alone (`TVM_USE_RUNTIME_LIB=1`), as a deployment does, and a process of its own builds it (the
build figure). The rounds take turns between the runtimes; each keeps its best. The largest
output difference is ours against ONNX Runtime's fp32.

    python bench/throughput.py [--models resnet50 mobilenet_v2] [--precisions fp32 bf16 int8]
                               [--requests 200] [--rounds 3] [--streams N] [--out bench/results]

Writes OUT/throughput.json.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx

import tvm_fuse
from tvm_fuse.benchmark import random_feed
from tvm_fuse.benchmarking.compare import differences, onnxruntime_session
from tvm_fuse.benchmarking.ort_quantize import ort_int8_model
from tvm_fuse.frontend.importer import graph_inputs
from tvm_fuse.target import host_cores

import tables
from models import model_and_feed

CALIBRATION_FEEDS = 16


# Our build and export, in a process of its own (its peak memory the build's): argv is the ONNX
# file, the precision, the library and the calibration feeds (an .npz each).
BUILD = """
import sys, numpy as np, onnx, tvm_fuse
from serving import peak_mb
path, precision, library, *feeds = sys.argv[1:]
calibration = [dict(np.load(feed)) for feed in feeds]
options = {"quantize": tvm_fuse.QuantConfig(calibration=calibration)} if precision == "int8" else {"precision": precision}
tvm_fuse.build(onnx.load(path), **options).export(library)
print(peak_mb())
"""


def build_ours(model: Path, precision: str, calibration: list[dict], library: Path, folder: Path) -> float:
    """Build and export `library`; the build's peak memory."""
    feeds = [folder / f"calibration{i}.npz" for i in range(len(calibration))]
    for path, feed in zip(feeds, calibration):
        np.savez(path, **feed)
    done = subprocess.run([sys.executable, "-c", BUILD, str(model), precision, str(library), *map(str, feeds)],
                          timeout=1200, capture_output=True, text=True, cwd=Path(__file__).parent)
    if done.returncode:
        raise RuntimeError(f"building {model.name} in {precision} failed:\n{done.stderr[-3000:]}")
    return float(done.stdout.split()[-1])


def serve(runtime: str, model: Path, feed: Path, precision: str, args, folder: Path) -> tuple[float, float, np.ndarray]:
    """(requests per second, peak MB, an output) of `runtime` serving in a process that imports it alone."""
    spec = {"runtime": runtime, "model": str(model), "feed": str(feed), "streams": args.streams,
            "requests": args.requests, "precision": precision, "result": str(folder / "result.pickle")}
    (folder / "spec.json").write_text(json.dumps(spec))
    # Ours as a deployment serves: TVM's runtime alone, no compiler.
    env = {**os.environ, "TVM_USE_RUNTIME_LIB": "1"} if runtime == "tvm_fuse" else None
    subprocess.run([sys.executable, str(Path(__file__).parent / "serving.py"), str(folder / "spec.json")],
                   check=True, timeout=1200, env=env)
    return pickle.loads((folder / "result.pickle").read_bytes())


def measure(name: str, precision: str, args, folder: Path) -> dict:
    model, feed = model_and_feed(name, 1)
    inputs = graph_inputs(model)
    feed = feed or random_feed(inputs, np.random.default_rng(0))
    np.savez(folder / "feed.npz", **feed)
    calibration = [random_feed(inputs, np.random.default_rng((7, i))) for i in range(CALIBRATION_FEEDS)] \
        if precision == "int8" else []
    source = folder / f"{name}.onnx"
    onnx.save(model, source)
    library = folder / f"{name}_{precision}.so"
    row = {"model": name, "precision": precision, "streams": args.streams,
           "build_peak_mb": build_ours(source, precision, calibration, library, folder)}
    served = {"tvm_fuse": library}
    if precision != "bf16":  # ONNX Runtime has no bf16 kernels for these models
        served["onnxruntime"] = source
        if precision == "int8":
            served["onnxruntime"] = folder / f"{name}_qdq.onnx"
            onnx.save(ort_int8_model(model, calibration), served["onnxruntime"])
    if not args.no_openvino:
        served["openvino"] = source
        if precision == "int8":
            import nncf
            import openvino

            served["openvino"] = folder / f"{name}_nncf.xml"
            quantized = nncf.quantize(openvino.Core().read_model(str(source)), nncf.Dataset(calibration),
                                      subset_size=len(calibration))
            openvino.save_model(quantized, str(served["openvino"]))
    outputs = {}
    for _ in range(args.rounds):
        for runtime, path in served.items():
            per_second, peak, outputs[runtime] = serve(runtime, path, folder / "feed.npz", precision, args, folder)
            row[f"{runtime}_per_s"] = max(row.get(f"{runtime}_per_s", 0.0), per_second)
            row[f"{runtime}_peak_mb"] = peak
    # Against ONNX Runtime's fp32 output, whatever the precision.
    reference = onnxruntime_session(model, 1).run(None, feed)[0]
    row["max_rel_diff"] = differences([outputs["tvm_fuse"]], [reference])[1]
    for other in ("onnxruntime", "openvino"):
        if f"{other}_per_s" in row:
            row[f"vs_{other}"] = row["tvm_fuse_per_s"] / row[f"{other}_per_s"]
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", default=["resnet50", "mobilenet_v2"])
    parser.add_argument("--precisions", nargs="+", choices=["fp32", "bf16", "int8"], default=None,
                        help="default: fp32, and bf16 / int8 where the host has AVX512-BF16 / VNNI or AVX2")
    parser.add_argument("--requests", type=int, default=200, help="timed requests per round (default 200)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of every runtime, taking turns (default 3)")
    parser.add_argument("--streams", type=int, default=host_cores(),
                        help="our streams and ONNX Runtime's calling threads (default: one per CPU)")
    parser.add_argument("--no-openvino", action="store_true")
    parser.add_argument("--out", type=Path, default=tables.RESULTS)
    args = parser.parse_args()
    features = tvm_fuse.host_features()
    precisions = args.precisions or ["fp32", *(["bf16"] if "avx512_bf16" in features else []),
                                     *(["int8"] if features & {"avx2", "avx512bw"} else [])]
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        for name in args.models:
            for precision in precisions:
                rows.append(measure(name, precision, args, Path(folder)))
                print(rows[-1], flush=True)
    print(tables.markdown(rows, tables.THROUGHPUT))
    tables.save(args.out, "throughput", rows, "python bench/throughput.py " + " ".join(sys.argv[1:]))


if __name__ == "__main__":
    main()
