"""Fused vs unfused, same schedules: builds a model twice (all fusion families on, and
`disable_fusion="all"`), then times both alternately on the same inputs.

    python bench/fusion_speedup.py resnet50 mobilenet_v2 [--repeat 20] [--warmup 3]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import tvm_fuse
from tvm_fuse.benchmark import random_feed
from tvm_fuse.cli import _load_onnx


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("models", nargs="+", help="named models (see tvm-fuse --help) or .onnx paths")
    parser.add_argument("--target", default="native")
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    args = parser.parse_args()
    print(f"{'model':14}{'fused ms':>10}{'unfused ms':>12}{'speedup':>9}{'kernels fused':>15}{'unfused':>9}")
    for name in args.models:
        onnx_model = _load_onnx(name, 1)
        fused = tvm_fuse.build(onnx_model, args.target)
        unfused = tvm_fuse.build(onnx_model, args.target, disable_fusion="all")
        feed = random_feed(fused.get_inputs())
        times = {"fused": [], "unfused": []}
        for _ in range(args.warmup):
            fused.run(None, feed)
            unfused.run(None, feed)
        for _ in range(args.repeat):  # alternate, so drifting machine load hits both alike
            for label, model in (("fused", fused), ("unfused", unfused)):
                start = time.perf_counter()
                model.run(None, feed)
                times[label].append((time.perf_counter() - start) * 1e3)
        a, b = np.median(times["fused"]), np.median(times["unfused"])
        calls = (fused.fusion_report()["kernel_calls"], unfused.fusion_report()["kernel_calls"])
        print(f"{name:14}{a:10.2f}{b:12.2f}{b / a:8.2f}x{calls[0]:15d}{calls[1]:9d}")


if __name__ == "__main__":
    main()
