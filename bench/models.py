"""tvm_fuse next to ONNX Runtime over the benchmark model list, at batch 1 and 8: latency,
ratio, GFLOP/s and percent of the machine's measured FMA peak. See docs/benchmarks.md.

    python bench/models.py [--models resnet50 resnet18 ...] [--batches 1 8] [--repeat 20]
                           [--warmup 3] [--threads N] [--out bench/results]

Writes OUT/models.json (every number, the machine and the peak) and OUT/models.png (the
ratio ONNX Runtime / tvm_fuse per model and batch).
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import platform
from pathlib import Path

import numpy as np
import onnx
import onnxruntime
import tvm

import tvm_fuse
from tvm_fuse.benchmark import random_feed
from tvm_fuse.compare import compare
from tvm_fuse.flops import model_flops
from tvm_fuse.models import LIGHT_MODELS, named_model
from tvm_fuse.peak import measure_peak
from tvm_fuse.target import host_cores, host_cpu

CNNS = ["resnet50", "inception_v1", "vgg19", "squeezenet", "densenet121", "mobilenet_v2", "resnet18"]
MODELS = [*CNNS, "transformer_encoder"]
FIXED_BATCH = "n/a (fixed batch 1)"


def cpu_model() -> str:
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
        return next(line.split(":", 1)[1].strip() for line in lines if line.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor()


def bench(name: str, batch: int, args, peak_gflops: float) -> dict:
    row = {"model": name, "batch": batch}
    if name in LIGHT_MODELS and batch != 1:
        return {**row, "skipped": FIXED_BATCH}  # their ONNX fixes batch 1: nothing to fake
    onnx_model = named_model(name, batch=batch)  # the built models take a static batch
    flops = model_flops(onnx_model)
    model = tvm_fuse.build(onnx_model, tuning_logs=[] if args.untuned else None)
    feed = random_feed(model.get_inputs(), dims={"batch": batch})
    result = compare(model, onnx_model, feed, args.threads, args.warmup, args.repeat)
    ours, theirs = result.tvm_fuse.median_ms, result.onnxruntime.median_ms
    return {
        **row, "gflops": flops / 1e9, "tvm_fuse_ms": ours, "onnxruntime_ms": theirs,
        "ratio": result.speedup,
        "tvm_fuse_gflops_per_s": flops / ours / 1e6, "onnxruntime_gflops_per_s": flops / theirs / 1e6,
        "tvm_fuse_pct_peak": 100 * flops / ours / 1e6 / peak_gflops,
        "onnxruntime_pct_peak": 100 * flops / theirs / 1e6 / peak_gflops,
        "tvm_fuse_latency": result.tvm_fuse.__dict__, "onnxruntime_latency": result.onnxruntime.__dict__,
        "max_rel_diff": result.max_rel_diff,
    }


def geomean_cnn_batch1(rows: list[dict]) -> float | None:
    ratios = [r["ratio"] for r in rows if r["model"] in CNNS and r["batch"] == 1 and "ratio" in r]
    return math.exp(np.mean(np.log(ratios))) if ratios else None


def print_table(rows: list[dict], geomean: float | None) -> None:
    head = ("model", "batch", "GFLOPs", "tvm_fuse ms", "ORT ms", "ORT/ours", "ours GF/s", "ORT GF/s",
            "ours %pk", "ORT %pk")
    print(("{:20}{:>6}" + "{:>12}" * 8).format(*head))
    for r in rows:
        if "ratio" not in r:
            print(f"{r['model']:20}{r['batch']:6}  {r['skipped']}")
            continue
        print(f"{r['model']:20}{r['batch']:6}{r['gflops']:12.2f}{r['tvm_fuse_ms']:12.2f}{r['onnxruntime_ms']:12.2f}"
              f"{r['ratio']:11.2f}x{r['tvm_fuse_gflops_per_s']:12.1f}{r['onnxruntime_gflops_per_s']:12.1f}"
              f"{r['tvm_fuse_pct_peak']:11.1f}%{r['onnxruntime_pct_peak']:11.1f}%")
    if geomean is not None:
        print(f"geomean ORT/ours over the CNNs at batch 1: {geomean:.2f}x (above 1: tvm_fuse is faster)")


def plot(rows: list[dict], batches: list[int], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(dict.fromkeys(r["model"] for r in rows))
    width = 0.8 / len(batches)
    fig, ax = plt.subplots(figsize=(max(6, 1.2 * len(names)), 4))
    for i, batch in enumerate(batches):
        ratio = {r["model"]: r.get("ratio", np.nan) for r in rows if r["batch"] == batch}
        xs = np.arange(len(names)) + (i - (len(batches) - 1) / 2) * width
        heights = [ratio.get(n, np.nan) for n in names]
        ax.bar_label(ax.bar(xs, heights, width, label=f"batch {batch}"), fmt="%.2f", fontsize=8)
        for x, height in zip(xs, heights):
            if np.isnan(height):  # skipped (a light model's fixed batch) or not run
                ax.text(x, 0.05, "n/a", ha="center", fontsize=8)
    ax.axhline(1.0, color="black", linewidth=1)
    ax.set_xlim(-0.5, len(names) - 0.5)  # keep the slots of models with no bar
    ax.set_xticks(np.arange(len(names)), names, rotation=30, ha="right")
    ax.set_ylabel("ONNX Runtime ms / tvm_fuse ms")
    ax.set_title("tvm_fuse vs ONNX Runtime (above 1: tvm_fuse is faster)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", default=MODELS, help=f"default: {' '.join(MODELS)}")
    parser.add_argument("--batches", nargs="+", type=int, default=[1, 8])
    parser.add_argument("--repeat", type=int, default=20, help="timed runs of each runtime (default 20)")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--untuned", action="store_true",
                        help="heuristic default knobs only, no tuning logs (default: the logs build() finds)")
    parser.add_argument("--threads", type=int, default=host_cores(), help="for both runtimes and the peak (default: all cores)")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    args = parser.parse_args()

    peak = measure_peak(args.threads)
    print(f"peak: {peak.gflops:.1f} GFLOP/s ({peak.method})")
    rows = []
    for name in args.models:
        for batch in args.batches:
            rows.append(bench(name, batch, args, peak.gflops))
    geomean = geomean_cnn_batch1(rows)
    print_table(rows, geomean)

    args.out.mkdir(parents=True, exist_ok=True)
    report = {
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "machine": {"cpu": cpu_model(), "llvm_cpu": host_cpu(), "features": sorted(tvm_fuse.host_features()),
                    "cores": host_cores()},
        "versions": {"tvm_fuse": tvm_fuse.__version__, "tvm": tvm.__version__,
                     "onnxruntime": onnxruntime.__version__, "onnx": onnx.__version__},
        "settings": {"threads": args.threads, "repeat": args.repeat, "warmup": args.warmup, "untuned": args.untuned},
        "peak": peak.to_json(),
        "results": rows,
        "geomean_ratio_cnn_batch1": geomean,
    }
    (args.out / "models.json").write_text(json.dumps(report, indent=2) + "\n")
    plot(rows, args.batches, args.out / "models.png")
    print(f"wrote {args.out / 'models.json'} and {args.out / 'models.png'}")


if __name__ == "__main__":
    main()
