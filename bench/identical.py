"""Whether a change left every benchmark model's outputs bit-identical: builds each model in
fp32, bf16 and int8 (calibrated on seeded random feeds, a real model on its own feed) for each
target, runs one feed (seeded, or the real model's), and saves the outputs, or compares them
bit for bit with outputs saved before the change.

    python bench/identical.py --save before.npz      # on the old commit
    python bench/identical.py --against before.npz   # on the new one: exit status 1 on any difference

--targets defaults to the host and `llvm -mcpu=skylake-avx512` (AVX-512 without VNNI or
AVX512-BF16: the other int8 and bf16 code paths), both of which run on an AVX-512 host.
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings

import numpy as np

import tvm_fuse
from tvm_fuse import QuantConfig
from tvm_fuse.benchmark import random_feed
from tvm_fuse.benchmarking.models.real import REAL_MODELS
from tvm_fuse.cache import ENV_CACHE_DIR

from models import CNNS, model_and_feed

CALIBRATION_FEEDS = 4
PRECISIONS = ("fp32", "bf16", "int8")


def outputs(name: str, target: str, precisions) -> dict[str, list[np.ndarray]]:
    """The model's outputs by precision, every build on one seeded feed."""
    onnx_model, feed = model_and_feed(name, 1)
    shapes = {k: v.shape for k, v in feed.items()} if feed else None  # as bench/models.py builds it
    found, fp32 = {}, None
    for precision in precisions:
        options = {"target": target, "input_shapes": shapes}
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # a target without AVX512-BF16 says bf16 runs portably
                if precision == "int8":  # a real model on its own feed: a random one may take another branch
                    inputs = (fp32 or tvm_fuse.build(onnx_model, **options)).get_inputs()
                    options["quantize"] = QuantConfig(calibration=[feed] if feed else [
                        random_feed(inputs, np.random.default_rng(seed)) for seed in range(CALIBRATION_FEEDS)])
                model = tvm_fuse.build(onnx_model, precision="bf16" if precision == "bf16" else "fp32", **options)
                fp32 = model if precision == "fp32" else fp32
            found[precision] = model.run(None, feed or random_feed(model.get_inputs(), np.random.default_rng(100)))
        except tvm_fuse.TvmFuseError as error:  # must be refused the same way before and after
            found[precision] = [np.array(str(error).splitlines()[0])]
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--save", metavar="NPZ", help="write the outputs here")
    action.add_argument("--against", metavar="NPZ", help="compare the outputs with these")
    parser.add_argument("--models", nargs="+", default=[*CNNS, "transformer_encoder", *REAL_MODELS])
    parser.add_argument("--precisions", nargs="+", default=PRECISIONS, choices=PRECISIONS)
    parser.add_argument("--targets", nargs="+", default=["native", "llvm -mcpu=skylake-avx512"])
    args = parser.parse_args()
    os.environ.pop(ENV_CACHE_DIR, None)  # every build compiled, none read back
    found = {}
    for name in args.models:
        for target in args.targets:
            for precision, values in outputs(name, target, args.precisions).items():
                found.update({f"{name}|{precision}|{target}|{i}": value for i, value in enumerate(values)})
            print(name, target, flush=True)
    if args.save:
        np.savez(args.save, **found)
        print(f"{len(found)} outputs saved to {args.save}")
        return 0
    saved = np.load(args.against)
    differing = sorted(key for key in set(found) | set(saved.files)
                       if key not in found or key not in saved.files
                       or found[key].dtype != saved[key].dtype or found[key].shape != saved[key].shape
                       or found[key].tobytes() != saved[key].tobytes())
    for key in differing:
        print(f"differs: {key}")
    print(f"{len(found) - len(differing)} of {len(found)} outputs bit-identical to {args.against}")
    return 1 if differing else 0


if __name__ == "__main__":
    sys.exit(main())
