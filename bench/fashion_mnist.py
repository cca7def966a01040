"""int8 and bf16 accuracy on real data: top-1 on the 10k Fashion-MNIST test images of two small
CNNs trained on its 60k training images, in fp32 (ONNX Runtime, tvm_fuse), in int8 with each
calibration method, and in bf16 where the CPU has AVX512-BF16. See docs/int8.md, docs/bf16.md.
Needs Debian's `dataset-fashion-mnist`.

    python bench/fashion_mnist.py [report] [--batch 100] [--calib-samples 500] [--out bench/results]
    python bench/fashion_mnist.py train [--epochs 4] [--out tvm_fuse/benchmarking/models/fashion_mnist]

`report` (the default) builds each model shipped in tvm_fuse/benchmarking/models/fashion_mnist/ in fp32 and
in int8, calibrated on the first `--calib-samples` training images with each method, and writes
OUT/fashion_mnist.json. `train` (needs torch) retrains both models, one thread, seeded, and
writes their ONNX files and bench/results/fashion_mnist_train.json.
"""

from __future__ import annotations

import argparse
import datetime
import json
import time
from pathlib import Path

import numpy as np
import onnx
import onnxruntime
import tvm

import tvm_fuse
from tvm_fuse.benchmarking.compare import onnxruntime_session
from tvm_fuse.benchmarking.datasets import fashion_mnist
from tvm_fuse.benchmarking.models import FASHION_MNIST_DIR, FASHION_MNIST_MODELS, fashion_mnist_model
from tvm_fuse.quantization.config import METHODS
from tvm_fuse.target import host_cores, host_cpu

RESULTS = Path(__file__).parent / "results"
CRITERION = 0.5  # largest int8 drop in top-1 points the int8 issue accepts


def top1(run, images: np.ndarray, labels: np.ndarray, batch: int) -> tuple[float, np.ndarray]:
    """(top-1 in percent, predicted classes) of `run(feed) -> [logits]` over batches of `images`."""
    predictions = np.concatenate([run({"image": images[i:i + batch]})[0].argmax(1)
                                  for i in range(0, len(images), batch)])
    return round(100 * float(np.mean(predictions == labels)), 2), predictions


def int8_convs(model: tvm_fuse.CompiledModel, onnx_model: onnx.ModelProto) -> int:
    """How many of the model's Conv nodes run inside int8 kernels."""
    convs = {n.name for n in onnx_model.graph.node if n.op_type == "Conv"}
    return sum(len(convs.intersection(k["onnx_nodes"])) for k in model.fusion_report()["kernels"] if k["int8"])


def report_model(name: str, test: tuple, calibration: np.ndarray, batch: int) -> dict:
    onnx_model = fashion_mnist_model(name)
    shapes = {"image": (batch, 1, 28, 28)}
    session = onnxruntime_session(onnx_model, num_threads=host_cores())
    ort_top1, _ = top1(lambda feed: session.run(None, feed), *test, batch)
    start = time.perf_counter()
    fp32 = tvm_fuse.build(onnx_model, input_shapes=shapes)
    row = {"model": name, "onnx_kb": round(len(onnx_model.SerializeToString()) / 1e3, 1),
           "convs": sum(n.op_type == "Conv" for n in onnx_model.graph.node),
           "onnxruntime_fp32": ort_top1, "build_s": {"fp32": round(time.perf_counter() - start, 1)}}
    row["tvm_fuse_fp32"], fp32_predictions = top1(lambda feed: fp32.run(None, feed), *test, batch)
    row["int8"] = {}
    for method in METHODS:
        start = time.perf_counter()
        int8 = tvm_fuse.build(onnx_model, input_shapes=shapes,
                              quantize=tvm_fuse.QuantConfig(calibration=calibration, method=method))
        row["build_s"][method] = round(time.perf_counter() - start, 1)  # calibration included
        accuracy, predictions = top1(lambda feed: int8.run(None, feed), *test, batch)
        row["int8"][method] = {"top1": accuracy, "drop": round(row["tvm_fuse_fp32"] - accuracy, 2),
                               "agree_with_fp32": round(100 * float(np.mean(predictions == fp32_predictions)), 2)}
        row["int8_convs"] = int8_convs(int8, onnx_model)
    row["bf16"] = None  # n/a: a CPU without AVX512-BF16 would build fp32
    if "avx512_bf16" in tvm_fuse.host_features():
        bf16 = tvm_fuse.build(onnx_model, input_shapes=shapes, precision="bf16")
        accuracy, predictions = top1(lambda feed: bf16.run(None, feed), *test, batch)
        row["bf16"] = {"top1": accuracy, "drop": round(row["tvm_fuse_fp32"] - accuracy, 2),
                       "agree_with_fp32": round(100 * float(np.mean(predictions == fp32_predictions)), 2)}
    return row


def print_table(rows: list[dict]) -> None:
    print(f"{'model':10}{'int8 convs':>11}{'ORT fp32':>10}{'tvm_fuse fp32':>15}"
          + "".join(f"{m + ' (drop)':>20}" for m in METHODS) + f"{'bf16 (drop)':>20}")
    for r in rows:
        cells = "".join(f"{r['int8'][m]['top1']:12.2f} ({r['int8'][m]['drop']:+.2f})" for m in METHODS)
        bf16 = f"{r['bf16']['top1']:12.2f} ({r['bf16']['drop']:+.2f})" if r["bf16"] else f"{'n/a':>20}"
        print(f"{r['model']:10}{r['int8_convs']:>5} of {r['convs']:<3}{r['onnxruntime_fp32']:10.2f}"
              f"{r['tvm_fuse_fp32']:15.2f}{cells}{bf16}")
    worst = max(r["int8"][m]["drop"] for r in rows for m in METHODS)
    print(f"top-1 in % of the 10k test images; drop = fp32 - int8, in points. Largest drop {worst:.2f} "
          f"({'within' if worst <= CRITERION else 'OVER'} the {CRITERION} criterion)")


def report(args) -> None:
    test = fashion_mnist.load("test")
    if len(test[0]) % args.batch:
        raise SystemExit(f"--batch {args.batch} does not divide the {len(test[0])} test images")
    calibration = fashion_mnist.load("train")[0][:args.calib_samples]
    rows = [report_model(name, test, calibration, args.batch) for name in FASHION_MNIST_MODELS]
    print_table(rows)
    args.out.mkdir(parents=True, exist_ok=True)
    result = {
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "machine": {"llvm_cpu": host_cpu(), "features": sorted(tvm_fuse.host_features()), "cores": host_cores()},
        "versions": {"tvm_fuse": tvm_fuse.__version__, "tvm": tvm.__version__,
                     "onnxruntime": onnxruntime.__version__, "onnx": onnx.__version__},
        "settings": {"batch": args.batch, "calibration": f"the first {args.calib_samples} training images",
                     "test_images": len(test[0]), "top1": "percent", "drop": "fp32 - int8 (or bf16), in points"},
        "results": rows,
    }
    (args.out / "fashion_mnist.json").write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out / 'fashion_mnist.json'}")


def train(args) -> None:
    import fashion_mnist_train  # torch, only here

    args.out.mkdir(parents=True, exist_ok=True)
    logs = {}
    for name in FASHION_MNIST_MODELS:
        model, logs[name] = fashion_mnist_train.train(name, args.epochs)
        onnx.save(fashion_mnist_train.export(model), args.out / f"{name}.onnx")
        print(f"{name}: torch top-1 {logs[name]['torch_top1']:.2f}% after {logs[name]['seconds']:.0f} s; "
              f"wrote {args.out / f'{name}.onnx'}")
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "fashion_mnist_train.json").write_text(json.dumps(logs, indent=2) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command")
    train_parser = commands.add_parser("train", help="retrain both models and export them (needs torch)")
    train_parser.add_argument("--epochs", type=int, default=4)
    train_parser.add_argument("--out", type=Path, default=FASHION_MNIST_DIR)
    report_parser = commands.add_parser("report", help="top-1 in fp32 and int8 (the default)")
    for command in (parser, report_parser):  # `report`'s options also work without the word
        command.add_argument("--batch", type=int, default=100, help="images per run; divides 10000 (default 100)")
        command.add_argument("--calib-samples", type=int, default=500, help="training images to calibrate on")
        command.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    train(args) if args.command == "train" else report(args)


if __name__ == "__main__":
    main()
