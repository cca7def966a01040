"""tvm_fuse next to ONNX Runtime and OpenVINO over the benchmark model list, at batch 1 and 8:
latency, ratios, GFLOP/s and percent of the machine's measured FMA peak. See docs/benchmarks.md.

    python bench/models.py [--models resnet50 resnet18 ...] [--batches 1 8] [--repeat 20]
                           [--warmup 3] [--threads N] [--out bench/results] [--no-openvino]
                           [--int8 [--calib-method entropy] [--calib-samples 16] [--agreement-samples 100]]
                           [--bf16 [--agreement-samples 100]]

Prints its tables (`bench/tables.py`) and writes OUT/models.json (every number, the machine and
the peak; models_int8.json with --int8), from which
`bench/report.py` writes docs/benchmarks.md, and a plot beside it (the ratio ONNX Runtime /
tvm_fuse per model and batch, in fp32).

OpenVINO (its CPU plugin, f32, latency hint) takes turns with the other two in the same run;
--no-openvino leaves it out.

With --int8, each model also runs in int8 in tvm_fuse, in ONNX Runtime (its static QDQ model)
and in OpenVINO (NNCF's post-training quantization), all calibrated on the same random feeds;
one run alternates all six runtimes, and the int8 table adds the top-1 agreement of tvm_fuse's
and ONNX Runtime's int8 models with their fp32 ones.

`--models yolov8_detector mobilenet_v3 unet crnn face_pnet face_rnet face_onet` times the small
models of `tvm_fuse/benchmarking/models/zoo.py` (seeded weights, 64x64 images) the same way.

The MiniLM models (`--models minilm_s16 minilm_s128 minilm_s384`: the real all-MiniLM-L6-v2 at
that sequence length, exported with the test extra's torch) also time tvm_fuse's and ONNX
Runtime's dynamic int8 quantization and tvm_fuse's build for every sequence length (MiniLM
exported with a symbolic sequence) in the same run, in a table of their own.

With --bf16, tvm_fuse's bf16 build (`precision="bf16"`) and OpenVINO's bf16 (its inference
precision hint) join the fp32 run, and a bf16 table gives both against tvm_fuse fp32, with each
bf16 model's output error against ONNX Runtime fp32 and, for classifiers, its top-1 agreement
with its own runtime's fp32 on --agreement-samples random inputs. Where the CPU lacks
AVX512-BF16 both fall back to fp32 (tvm_fuse says so in a warning): measure on a host that has it.
For the MiniLM models --bf16 also times our dynamic int8 build with `precision="bf16"` (the
attention's products in bf16), as `ours8b` in their table.
"""

from __future__ import annotations

import argparse
import functools
import importlib.metadata
import math
import sys
import time
from pathlib import Path

import numpy as np
import onnx
import onnxruntime
import tvm

import tvm_fuse
from tvm_fuse import QuantConfig
from tvm_fuse.benchmark import Latency, random_feed
from tvm_fuse.benchmarking.compare import (
    OpenVINOSession,
    differences,
    onnxruntime_session,
    time_alternating,
    top1_agreement,
)
from tvm_fuse.benchmarking.flops import model_flops
from tvm_fuse.benchmarking.models import named_model, zoo
from tvm_fuse.benchmarking.models.corpus import corpus, corpus_feed, corpus_path
from tvm_fuse.benchmarking.models.real import REAL_MODELS, real_model_feed, real_model_path
from tvm_fuse.benchmarking.ort_quantize import ORT_INT8_SCHEME, ort_dynamic_int8_model, ort_int8_model
from tvm_fuse.benchmarking.peak import measure_peak
from tvm_fuse.frontend.fixups import apply_fixups
from tvm_fuse.frontend.importer import set_input_shapes
from tvm_fuse.frontend.load import load_model
from tvm_fuse.quantization.config import METHODS
from tvm_fuse.target import host_cores

import tables

CNNS = ["resnet50", "inception_v1", "vgg19", "squeezenet", "densenet121", "mobilenet_v2", "resnet18"]
MODELS = [*CNNS, "transformer_encoder", *REAL_MODELS]
# The real all-MiniLM-L6-v2 at a sequence length; not in the default list: its export needs the
# test extra's torch and weights.
MINILM = {f"minilm_s{seq}": seq for seq in (16, 128, 384)}
# The small architectures of tvm_fuse/benchmarking/models/zoo.py (seeded weights, 64x64 inputs; the face
# cascade's nets at the sizes its detector runs them: one 240x320 image, 24x24 and 48x48 crops);
# not in the default list: the tests' stand-ins for what users bring, timed on request.
ZOO = {name: getattr(zoo, name) for name in ("yolov8_detector", "mobilenet_v3", "unet", "crnn")}
ZOO.update({f"face_{net}": functools.partial(zoo.face_cascade, net) for net in ("pnet", "rnet", "onet")})
CALIBRATION_SEED, AGREEMENT_SEED = 1, 2  # each feed i draws from rng((seed, i)); the timed feed from rng(0)


def model_and_feed(name: str, batch: int) -> tuple[onnx.ModelProto, dict | None]:
    """The model at a static `batch` (the light models rebatched from 1), or a real model as it
    ships (ONNX Runtime and OpenVINO run it so) with its feed in its own range (None: random)."""
    if name in MINILM:
        return minilm_and_feed(MINILM[name], batch)
    if name in ZOO:
        return ZOO[name](batch=batch), None
    if name in corpus():  # at the batch its package feeds
        return load_model(corpus_path(name)), corpus_feed(name)
    if name not in REAL_MODELS:
        return named_model(name, batch=batch), None
    return load_model(real_model_path(name)), real_model_feed(name, batch)


def minilm_and_feed(seq: int, batch: int) -> tuple[onnx.ModelProto, dict]:
    """MiniLM exported at sequence length `seq` (its batch dynamic), and a feed of `batch`
    sequences of random token ids, every token real (the mask all ones): the full-length work."""
    from tvm_fuse.benchmarking.models import minilm  # torch and the weights' package: the test extra

    rng = np.random.default_rng(0)
    feed = {"input_ids": rng.integers(1000, 30000, (batch, seq)).astype(np.int64),
            "attention_mask": np.ones((batch, seq), np.int64)}
    return minilm.export_minilm(seq_len=seq), feed


@functools.cache
def any_length_minilm(untuned: bool) -> tvm_fuse.CompiledModel:
    """MiniLM exported with symbolic batch and sequence and built once: one build serves every
    MiniLM row of the run."""
    from tvm_fuse.benchmarking.models import minilm

    return tvm_fuse.build(minilm.export_minilm(seq_len=None), tuning_logs=[] if untuned else None)


def bench(name: str, batch: int, args, peak_gflops: float) -> dict:
    row = {"model": name, "batch": batch}
    onnx_model, feed = model_and_feed(name, batch)
    shapes = {k: v.shape for k, v in feed.items()} if feed else None
    static = set_input_shapes(onnx_model, shapes) if shapes else onnx_model
    flops = model_flops(apply_fixups(static))  # folded shape arithmetic: static shapes throughout
    started = time.monotonic()
    model = tvm_fuse.build(onnx_model, input_shapes=shapes, tuning_logs=[] if args.untuned else None)
    row["compile_s"] = time.monotonic() - started
    feed = feed or random_feed(model.get_inputs(), dims={"batch": batch})
    if args.int8:
        ours_latency, theirs_latency, max_rel_diff, int8 = bench_int8(onnx_model, model, feed, batch, args)
    else:
        ours_latency, theirs_latency, max_rel_diff, int8 = bench_fp32(onnx_model, static, model, feed, args,
                                                                      dynamic_int8=name in MINILM)
    ours, theirs = ours_latency.median_ms, theirs_latency.median_ms
    return {
        **row, "gflops": flops / 1e9, "tvm_fuse_ms": ours, "onnxruntime_ms": theirs,
        "ratio": theirs / ours,
        "tvm_fuse_gflops_per_s": flops / ours / 1e6, "onnxruntime_gflops_per_s": flops / theirs / 1e6,
        "tvm_fuse_pct_peak": 100 * flops / ours / 1e6 / peak_gflops,
        "onnxruntime_pct_peak": 100 * flops / theirs / 1e6 / peak_gflops,
        "tvm_fuse_latency": ours_latency.__dict__, "onnxruntime_latency": theirs_latency.__dict__,
        "max_rel_diff": max_rel_diff, **int8,
    }


def bench_fp32(onnx_model, static, model, feed: dict, args,
               dynamic_int8: bool = False) -> tuple[Latency, Latency, float, dict]:
    """tvm_fuse's and ONNX Runtime's latencies, their largest output difference, and the
    OpenVINO columns (none with --no-openvino), from one run in which the three take turns;
    with `dynamic_int8`, ONNX Runtime's dynamically quantized model takes its turn too."""
    runtimes = {"ours": model, "theirs": onnxruntime_session(onnx_model, args.threads)}
    shapes, tuning = {k: v.shape for k, v in feed.items()}, [] if args.untuned else None
    if dynamic_int8:
        runtimes["ours_dynamic_int8"] = tvm_fuse.build(onnx_model, input_shapes=shapes,
                                                       quantize=QuantConfig(activations="dynamic"),
                                                       tuning_logs=tuning)
        runtimes["ours_any_length"] = any_length_minilm(args.untuned)
        theirs_int8 = ort_dynamic_int8_model(onnx_model)
        runtimes["theirs_dynamic_int8"] = onnxruntime_session(theirs_int8, args.threads)
        # What a user with a quantize_dynamic model runs: our build of that model as it is.
        runtimes["ours_of_theirs_int8"] = tvm_fuse.build(theirs_int8, input_shapes=shapes, tuning_logs=tuning)
    if args.bf16:
        runtimes["ours_bf16"] = tvm_fuse.build(onnx_model, input_shapes=shapes, precision="bf16",
                                               tuning_logs=tuning)
        if dynamic_int8:  # int8 dense layers, the attention's products in bf16
            runtimes["ours_dynamic_int8_bf16"] = tvm_fuse.build(onnx_model, input_shapes=shapes,
                                                                quantize=QuantConfig(activations="dynamic"),
                                                                precision="bf16",
                                                                tuning_logs=tuning)
    if not args.no_openvino:
        # As shipped, else with the feed's static shapes (as an OpenVINO user would reshape it);
        # a model it cannot convert either way has n/a in its columns.
        for candidate in [onnx_model] + ([static] if static is not onnx_model else []):
            try:
                runtimes["openvino"] = OpenVINOSession(candidate, args.threads)
                if args.bf16:
                    runtimes["openvino_bf16"] = OpenVINOSession(candidate, args.threads, "bf16")
                break
            except ImportError:
                raise
            except Exception as error:  # noqa: BLE001 -- a conversion failure
                print(f"OpenVINO cannot convert {onnx_model.graph.name or 'the model'}: "
                      f"{str(error).strip().splitlines()[0]}", file=sys.stderr)
    times = time_alternating(runtimes, feed, args.threads, args.warmup, args.repeat)
    outputs = {name: runtime.run(None, feed) for name, runtime in runtimes.items()}
    _, max_rel_diff = differences(outputs["ours"], outputs["theirs"])
    openvino = {}
    if "openvino" in runtimes:
        openvino_ms = times["openvino"].median_ms
        openvino = {"openvino_ms": openvino_ms, "ratio_openvino": openvino_ms / times["ours"].median_ms,
                    "openvino_latency": times["openvino"].__dict__,
                    "openvino_max_rel_diff": differences(outputs["openvino"], outputs["theirs"])[1]}
    if dynamic_int8:
        openvino.update({f"{side}_dynamic_int8_{key}": value for side, runtime in (("tvm_fuse", "ours"),
                                                                                 ("onnxruntime", "theirs"))
                         for key, value in (("ms", times[f"{runtime}_dynamic_int8"].median_ms),
                                            ("max_rel_diff", differences(outputs[f"{runtime}_dynamic_int8"],
                                                                         outputs["theirs"])[1]))})
        openvino["tvm_fuse_any_length_ms"] = times["ours_any_length"].median_ms
        openvino["tvm_fuse_of_ort_int8_ms"] = times["ours_of_theirs_int8"].median_ms
        openvino["tvm_fuse_of_ort_int8_max_rel_diff"] = differences(outputs["ours_of_theirs_int8"],
                                                                    outputs["theirs_dynamic_int8"])[1]
        if "ours_dynamic_int8_bf16" in runtimes:
            openvino["tvm_fuse_dynamic_int8_bf16_ms"] = times["ours_dynamic_int8_bf16"].median_ms
            openvino["tvm_fuse_dynamic_int8_bf16_max_rel_diff"] = differences(outputs["ours_dynamic_int8_bf16"],
                                                                              outputs["theirs"])[1]
    for name in ("ours_bf16", "openvino_bf16"):  # each against tvm_fuse fp32, its error against ONNX Runtime's
        if name in runtimes:
            openvino.update({f"{name}_ms": times[name].median_ms,
                             f"{name}_speedup": times["ours"].median_ms / times[name].median_ms,
                             f"{name}_max_rel_diff": differences(outputs[name], outputs["theirs"])[1]})
    if args.bf16 and classifier(model):
        feeds = agreement_feeds(model, len(next(iter(feed.values()))), args.agreement_samples)
        # each bf16 build's top-1 against its own runtime's fp32
        for name, fp32 in (("ours_bf16", "ours"), ("openvino_bf16", "openvino")):
            if name in runtimes:
                openvino[f"{name}_top1_agreement"] = top1_agreement(runtimes[name], runtimes[fp32], feeds)[0]
    return times["ours"], times["theirs"], max_rel_diff, openvino


def classifier(model) -> bool:
    """One output of shape (batch, classes), trailing 1s allowed: top-1 agreement applies."""
    output = model.get_outputs()
    return len(output) == 1 and len(output[0].shape) >= 2 and all(d == 1 for d in output[0].shape[2:])


def agreement_feeds(model, batch: int, samples: int) -> list[dict]:
    """Random feeds of `samples` rows in all, apart from the calibration feeds and the timed one."""
    return [random_feed(model.get_inputs(), np.random.default_rng((AGREEMENT_SEED, i)), {"batch": batch})
            for i in range(math.ceil(samples / batch))]


def bench_int8(onnx_model, model, feed: dict, batch: int, args) -> tuple[Latency, Latency, float, dict]:
    """tvm_fuse's and ONNX Runtime's fp32 latencies, their largest output difference, and the
    int8 columns, from one run in which tvm_fuse and ONNX Runtime, each in fp32 and in int8,
    take turns; both int8 models are calibrated on the same random feeds."""
    inputs, dims = model.get_inputs(), {"batch": batch}
    calibration = [random_feed(inputs, np.random.default_rng((CALIBRATION_SEED, i)), dims)
                   for i in range(args.calib_samples)]
    int8_model = tvm_fuse.build(onnx_model, input_shapes={k: v.shape for k, v in feed.items()},
                                tuning_logs=[] if args.untuned else None,
                                quantize=QuantConfig(calibration=calibration, method=args.calib_method))
    session = onnxruntime_session(onnx_model, args.threads)
    ort_int8 = onnxruntime_session(ort_int8_model(onnx_model, calibration, args.calib_method), args.threads)
    runtimes = {"ours": model, "ours_int8": int8_model, "theirs": session, "theirs_int8": ort_int8}
    if not args.no_openvino:
        runtimes["openvino"] = OpenVINOSession(onnx_model, args.threads)
        runtimes["openvino_int8"] = OpenVINOSession(onnx_model, args.threads, calibration=calibration)
    times = time_alternating(runtimes, feed, args.threads, args.warmup, args.repeat)
    outputs = {name: runtime.run(None, feed) for name, runtime in runtimes.items()}
    _, max_rel_diff = differences(outputs["ours"], outputs["theirs"])
    ms = {name: latency.median_ms for name, latency in times.items()}
    int8 = {
        "int8_kernels": sum(1 for k in int8_model.fusion_report()["kernels"] if k["int8"]),
        "tvm_fuse_int8_ms": ms["ours_int8"], "onnxruntime_int8_ms": ms["theirs_int8"],
        "int8_speedup": ms["ours"] / ms["ours_int8"],
        "ratio_int8": ms["theirs_int8"] / ms["ours_int8"],
        "onnxruntime_int8_speedup": ms["theirs"] / ms["theirs_int8"],
        "tvm_fuse_int8_latency": times["ours_int8"].__dict__, "onnxruntime_int8_latency": times["theirs_int8"].__dict__,
        "int8_max_rel_diff": {  # each int8 model's outputs against its own fp32 model's, on the timed feed
            "tvm_fuse": differences(outputs["ours_int8"], outputs["ours"])[1],
            "onnxruntime": differences(outputs["theirs_int8"], outputs["theirs"])[1]},
        "top1_agreement": None,
    }
    if "openvino_int8" in runtimes:
        int8.update({"openvino_ms": ms["openvino"], "ratio_openvino": ms["openvino"] / ms["ours"],
                     "openvino_latency": times["openvino"].__dict__, "openvino_int8_ms": ms["openvino_int8"],
                     "ratio_openvino_int8": ms["openvino_int8"] / ms["ours_int8"],
                     "openvino_int8_latency": times["openvino_int8"].__dict__})
        int8["int8_max_rel_diff"]["openvino"] = differences(outputs["openvino_int8"], outputs["openvino"])[1]
    if classifier(model):
        feeds = agreement_feeds(model, batch, args.agreement_samples)
        ours, rows = top1_agreement(int8_model, model, feeds)
        theirs, _ = top1_agreement(ort_int8, session, feeds)
        int8["top1_agreement"] = {"tvm_fuse": ours, "onnxruntime": theirs, "inputs": rows}
    return times["ours"], times["theirs"], max_rel_diff, int8


def geomean_batch1(rows: list[dict], models, key: str = "ratio") -> float | None:
    return tables.geomean(r.get(key) for r in rows if r["model"] in models and r["batch"] == 1)


def print_tables(rows: list[dict], geomeans: dict[str, tuple[float | None, float | None]]) -> None:
    print(tables.markdown(rows, tables.LATENCY))
    for group, (geomean, geomean_openvino) in geomeans.items():
        if geomean is not None:
            openvino = f", OpenVINO / ours {geomean_openvino:.2f}x" if geomean_openvino is not None else ""
            print(f"geomean over the {group} at batch 1: ORT / ours {geomean:.2f}x{openvino} (above 1: tvm_fuse is faster)")
    for marker, table in (("tvm_fuse_int8_ms", tables.INT8), ("ours_bf16_ms", tables.BF16),
                          ("onnxruntime_dynamic_int8_ms", tables.TRANSFORMERS)):
        chosen = [r for r in rows if marker in r]
        if chosen:
            print("\n" + tables.markdown(chosen, table))


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
            if np.isnan(height):  # not run
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
    parser.add_argument("--models", nargs="+", default=MODELS,
                        help=f"default: {' '.join(MODELS)}; also {' '.join(MINILM)} (with the test extra)")
    parser.add_argument("--batches", nargs="+", type=int, default=[1, 8])
    parser.add_argument("--repeat", type=int, default=20, help="timed runs of each runtime (default 20)")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--untuned", action="store_true",
                        help="heuristic default knobs only, no tuning logs (default: the logs build() finds)")
    parser.add_argument("--threads", type=int, default=host_cores(), help="for every runtime and the peak (default: all cores)")
    parser.add_argument("--out", type=Path, default=tables.RESULTS)
    parser.add_argument("--no-openvino", action="store_true",
                        help="leave OpenVINO out (f32, and with --int8 its NNCF int8)")
    parser.add_argument("--int8", action="store_true",
                        help="also time each model in int8, in tvm_fuse, ONNX Runtime and OpenVINO (NNCF), "
                             "and the top-1 agreement of ours and ONNX Runtime's")
    parser.add_argument("--calib-method", choices=METHODS, default="entropy", help="for --int8 (default entropy)")
    parser.add_argument("--calib-samples", type=int, default=16, metavar="N",
                        help="for --int8: random feeds (standard normal) to calibrate on (default 16)")
    parser.add_argument("--bf16", action="store_true",
                        help="also time tvm_fuse's bf16 build and OpenVINO's bf16 in the fp32 run (not with --int8)")
    parser.add_argument("--agreement-samples", type=int, default=100, metavar="M",
                        help="for --int8 and --bf16: random inputs, apart from the calibration feeds, "
                             "for top-1 agreement (default 100)")
    args = parser.parse_args()
    if args.bf16 and args.int8:
        parser.error("--bf16 joins the fp32 run; time --int8 in a run of its own")

    peak = measure_peak(args.threads)
    print(f"peak: {peak.gflops:.1f} GFLOP/s ({peak.method})")
    rows = []
    for name in args.models:
        for batch in args.batches:
            if batch != 1 and name in REAL_MODELS and REAL_MODELS[name].batch_fixed:
                continue  # the export fixes batch 1
            rows.append(bench(name, batch, args, peak.gflops))
    geomeans = {group: (geomean_batch1(rows, models), geomean_batch1(rows, models, "ratio_openvino"))
                for group, models in (("CNNs", CNNS), ("real models", REAL_MODELS))}
    print_tables(rows, geomeans)

    openvino = any("openvino_ms" in r for r in rows)
    settings = {"threads": args.threads, "repeat": args.repeat, "warmup": args.warmup, "untuned": args.untuned,
                "int8": args.int8, "openvino": openvino}
    if args.int8:
        settings.update(calib_method=args.calib_method, calib_samples=args.calib_samples,
                        agreement_samples=args.agreement_samples, onnxruntime_int8=ORT_INT8_SCHEME)
    report = {
        "versions": {"tvm_fuse": tvm_fuse.__version__, "tvm": tvm.__version__,
                     "onnxruntime": onnxruntime.__version__, "onnx": onnx.__version__,
                     **({"openvino": importlib.metadata.version("openvino")} if openvino else {})},
        "settings": settings,
        "peak": peak.to_json(),
        "geomean_ratio_cnn_batch1": geomeans["CNNs"][0],
        "geomean_ratio_openvino_cnn_batch1": geomeans["CNNs"][1],
        "geomean_ratio_real_batch1": geomeans["real models"][0],
        "geomean_ratio_openvino_real_batch1": geomeans["real models"][1],
    }
    name = "models_int8" if args.int8 else "models"
    path = tables.save(args.out, name, rows, "python bench/models.py " + " ".join(sys.argv[1:]), **report)
    plot(rows, args.batches, path.with_suffix(".png"))
    print(f"wrote {path} and its plot")


if __name__ == "__main__":
    main()
