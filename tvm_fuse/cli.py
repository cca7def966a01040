"""The `tvm-fuse` command: build, run and benchmark ONNX models."""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
from pathlib import Path

import numpy as np
from tvm.base import _RUNTIME_ONLY

if _RUNTIME_ONLY:  # every command may compile; exports are served in Python (`tvm_fuse.load`)
    raise SystemExit("tvm-fuse needs TVM's compiler, and this process loads TVM's runtime alone "
                     "(TVM_USE_RUNTIME_LIB=1): unset it to run tvm-fuse; tvm_fuse.load serves exports with it set")

from . import api, artifact, build_timings, cache
from .benchmark import random_feed
from .benchmarking import models
from .benchmarking.compare import OpenVINOSession, differences, onnxruntime_session, time_alternating
from .benchmarking.ort_quantize import ORT_DYNAMIC_INT8_SCHEME, ORT_INT8_SCHEME, ort_dynamic_int8_model, ort_int8_model
from .calibrate import quantize
from .errors import InputError, TvmFuseError
from .frontend.load import load_model
from .fusion_report import FusionReport
from .patterns.table import FAMILIES
from .quantization.config import ACTIVATIONS, METHODS, QuantConfig
from .target import host_cores, target_string
from .threads import set_spinning
from .transform.lower_composites import WINOGRAD_SWITCH
from .transform.realize.bf16 import PRECISIONS
from .tuner.tune import tune
from .tuning.database import ENV_LOGS

DEFAULT_MODEL = "resnet50"

_MODEL_HELP = (
    "an .onnx file, or the name of a model that needs no download: "
    + ", ".join(models.LIGHT_MODELS)
    + " (the onnx wheel's light models, weights drawn from a seed), mobilenet_v2, resnet18, "
    "transformer_encoder"
)
_CACHE_HELP = (
    "keep builds in DIR and load a kept one instead of compiling when the model, target, options, tuning "
    f"records and versions all match (default: ${cache.ENV_CACHE_DIR}, else no cache); see `tvm-fuse cache`"
)
_TARGET_HELP = (
    "CPU to compile for, in TVM's string form, e.g. 'llvm -mcpu=skylake-avx512 -num-cores=2' "
    "or 'llvm -mcpu=cascadelake -mattr=+avx512f'; 'native' (default) is this machine"
)


def _shape_arg(text: str) -> tuple[str, tuple[int, ...]]:
    name, _, dims = text.rpartition("=")
    try:
        return name, tuple(int(d) for d in dims.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected NAME=D1,D2,... such as data=8,3,224,224, got {text!r}") from None


def _input_arg(text: str) -> tuple[str, Path]:
    name, sep, path = text.partition("=")
    if not sep:
        raise argparse.ArgumentTypeError(f"expected NAME=FILE.npy, got {text!r}")
    return name, Path(path)


def _load_onnx(spec: str, batch: int):
    path = Path(spec)
    if path.suffix == ".onnx" or path.exists():
        return spec  # build() reads paths itself and reports what is wrong with them
    return models.named_model(spec, batch=batch)


def _build_options(args) -> dict:
    """The options of `api.build` every command's build takes from its arguments, but the precision's."""
    return dict(target=args.target, input_shapes=dict(args.input_shape or []), disable_fusion=args.disable_fusion,
                tuning_logs=args.tuning_logs, cache_dir=args.cache_dir)


def _build(args):
    return api.build(_load_onnx(args.model, args.batch), quantize=_quant_config(args), precision=args.precision,
                     **_build_options(args))


def _quant_config(args) -> QuantConfig | None:
    if not args.int8:
        if args.calib:
            raise InputError("--calib is for int8 builds: add --int8")
        return None
    if getattr(args, "int8_activations", "static") == "dynamic":
        return QuantConfig(activations="dynamic", exclude=args.int8_exclude or ())
    if not args.calib:
        raise InputError("--int8 needs --calib PATH: input samples (.npy, .npz or a folder of them), "
                         "or a table from `tvm-fuse quantize`")
    return QuantConfig(calibration=args.calib, method=args.calib_method, exclude=args.int8_exclude or (),
                       max_samples=args.calib_samples)


def cmd_build(args) -> int:
    model = _build(args)
    output = Path(args.output or Path(args.model).stem + ".so")
    model.export(output)
    print(f"built {args.model} for {target_string(model.target, brief=True)}")
    if args.timings:
        print(build_timings.table(model.fusion_report()["build_seconds"]))
    print(f"wrote {output}, {output.with_suffix('.weights')} and {output.with_suffix('.json')}")
    return 0


def _read_feed(model, pairs) -> dict:
    if not pairs:
        print("no --input given: running on random inputs")
        return random_feed(model.get_inputs())
    feed = {}
    for name, path in pairs:
        try:
            feed[name] = np.load(path)
        except (OSError, ValueError) as error:
            raise TvmFuseError(f"cannot read input {name!r} from {path}: {error}") from None
    return feed


def cmd_run(args) -> int:
    model = artifact.load(args.model) if args.model.endswith(".so") else _build(args)
    outputs = model.run(None, _read_feed(model, args.input))
    for info, value in zip(model.get_outputs(), outputs):
        flat = value.reshape(-1)
        print(f"{info.name}: shape {list(value.shape)} {value.dtype}, first values {np.array2string(flat[:5], precision=5)}")
        if args.output_dir:
            args.output_dir.mkdir(parents=True, exist_ok=True)
            target = args.output_dir / (info.name.replace("/", "_") + ".npy")
            np.save(target, value)
            print(f"  saved to {target}")
    return 0


def cmd_tune(args) -> int:
    tune(_load_onnx(args.model, args.batch), target=args.target, trials=args.trials, log_dir=args.log_dir,
         timeout=args.timeout, repeat=args.repeat, input_shapes=dict(args.input_shape or []),
         disable_fusion=args.disable_fusion, rpc_tracker=args.rpc_tracker, rpc_key=args.rpc_key,
         plot=args.plot, quantize=_quant_config(args), precision=args.precision)
    return 0


def cmd_bench(args) -> int:
    if args.no_spinning:
        set_spinning(False)
    if args.int8 or args.precision:
        args.precision = args.precision or "fp32"
        return _bench_one(args)
    return _bench_precisions(args)


BENCH_CALIBRATION_FEEDS = 8  # `bench`'s int8 builds calibrate on this many seeded random inputs


def _bench_precisions(args) -> int:
    """fp32 and each precision the target runs (bf16 with AVX512-BF16; int8 with AVX2 or
    AVX-512), each beside ONNX Runtime and OpenVINO (where installed) at that precision, every
    runtime taking turns."""
    onnx_model = load_model(_load_onnx(args.model, args.batch))
    options = _build_options(args)
    fp32 = api.build(onnx_model, **options)
    feed = random_feed(fp32.get_inputs(), dims={"batch": args.batch})
    ours = {"fp32": fp32}
    if "avx512_bf16" in fp32.features:
        ours["bf16"] = api.build(onnx_model, precision="bf16", **options)
    calibration = None
    if fp32.features & {"avx2", "avx512bw"}:
        calibration = [random_feed(fp32.get_inputs(), np.random.default_rng(seed), {"batch": args.batch})
                       for seed in range(BENCH_CALIBRATION_FEEDS)]
        ours["int8"] = api.build(onnx_model, quantize=QuantConfig(calibration=calibration), **options)
    threads = args.threads or host_cores()
    print(f"model {args.model}, target {target_string(fp32.target, brief=True)}, {threads} thread(s), {args.repeat} "
          f"runs after {args.warmup} warm-up, every runtime taking turns"
          + (f"; int8 calibrated on {len(calibration)} seeded random inputs (a speed check: not an accuracy one)"
             if calibration else ""))
    runtimes = {("tvm_fuse", precision): model for precision, model in ours.items()}
    if not args.no_ort:
        runtimes.update(_reference_runtimes(onnx_model, ours, calibration, threads, not args.no_spinning))
    times = time_alternating({f"{name} {precision}": runtime for (name, precision), runtime in runtimes.items()},
                             feed, threads, args.warmup, args.repeat)
    ms = {key: times[f"{key[0]} {key[1]}"].median_ms for key in runtimes}
    reference = runtimes.get(("onnxruntime", "fp32"))
    others = [name for name in ("onnxruntime", "openvino") if any(key[0] == name for key in runtimes)]
    labels = {"onnxruntime": "ONNX Runtime", "openvino": "OpenVINO"}
    print(f"{'precision':10}{'tvm_fuse ms':>12}" + "".join(f"{labels[n] + ' ms':>17}{labels[n] + ' / ours':>20}"
                                                          for n in others)
          + ("   max rel diff" if reference else ""))
    for precision, model in ours.items():
        line = f"{precision:10}{ms['tvm_fuse', precision]:12.2f}"
        for name in others:
            # ONNX Runtime has no bf16: its fp32 stands beside our bf16, marked so.
            key = next((k for k in [(name, precision), (name, "fp32")] if k in ms), None)
            mark = " " if key == (name, precision) else "*"
            line += f"{ms[key]:16.2f}{mark}{ms[key] / ms['tvm_fuse', precision]:19.3f}x"
        if reference:
            line += f"{differences(model.run(None, feed), reference.run(None, feed))[1]:15.3g}"
        print(line)
    print("above 1: tvm_fuse is faster; * that runtime in fp32 (it has no such precision here)"
          + ("; max rel diff: tvm_fuse's outputs against ONNX Runtime fp32, relative to the largest" if reference
             else ""))
    return 0


def _reference_runtimes(onnx_model, ours: dict, calibration, threads: int, spinning: bool) -> dict:
    """ONNX Runtime and, where installed, OpenVINO at each precision of `ours` they run: ONNX
    Runtime in fp32 and in int8 (its static QDQ model), OpenVINO in f32, bf16 (its precision
    hint) and int8 (NNCF's), the int8 models calibrated on `calibration`."""
    runtimes = {("onnxruntime", "fp32"): onnxruntime_session(onnx_model, threads, spinning)}
    if "int8" in ours:
        runtimes["onnxruntime", "int8"] = onnxruntime_session(ort_int8_model(onnx_model, calibration), threads,
                                                              spinning)
    try:
        runtimes["openvino", "fp32"] = OpenVINOSession(onnx_model, threads)
    except ImportError:
        return runtimes
    if "bf16" in ours:
        runtimes["openvino", "bf16"] = OpenVINOSession(onnx_model, threads, "bf16")
    if "int8" in ours and importlib.util.find_spec("nncf") is not None:
        runtimes["openvino", "int8"] = OpenVINOSession(onnx_model, threads, calibration=calibration)
    return runtimes


def _bench_one(args) -> int:
    onnx_model = load_model(_load_onnx(args.model, args.batch))
    model = api.build(onnx_model, quantize=_quant_config(args), precision=args.precision, **_build_options(args))
    feed = random_feed(model.get_inputs(), dims={"batch": args.batch})
    threads = args.threads or host_cores()
    int8 = sum(1 for k in model.fusion_report()["kernels"] if k["int8"])
    dynamic = args.int8 and args.int8_activations == "dynamic"
    left_out = None if dynamic else _ort_int8_left_out(args)
    header = (f"model {args.model}, target {target_string(model.target, brief=True)}, {threads} thread(s), "
              f"{args.repeat} runs after {args.warmup} warm-up, in blocks alternating with ONNX Runtime")
    if args.int8:
        header += f"; tvm_fuse in int8 ({int8} int8 kernels), ONNX Runtime in fp32"
        header += (f" (not in int8: {left_out})" if left_out else f" and in int8 ({ORT_DYNAMIC_INT8_SCHEME})"
                   if dynamic else f" and in int8 ({ORT_INT8_SCHEME}, same samples)")
    if model.precision == "bf16":
        bf16 = sum(1 for k in model.fusion_report()["kernels"] if k["precision"] == "bf16")
        header += f"; tvm_fuse in bf16 ({bf16} bf16 kernels), ONNX Runtime in fp32"
    print(header)
    if args.no_ort:
        print(f"tvm_fuse: {model.benchmark(feed, args.warmup, args.repeat, threads)}")
        return 0
    ours, fp32 = ("tvm_fuse int8", "onnxruntime fp32") if args.int8 else ("tvm_fuse", "onnxruntime")
    spinning = not args.no_spinning
    session = onnxruntime_session(onnx_model, threads, spinning)
    runtimes = {ours: model, fp32: session}
    int8_model = None
    if dynamic:
        int8_model = ort_dynamic_int8_model(onnx_model, exclude=args.int8_exclude or ())
    elif args.int8 and not left_out:
        int8_model = ort_int8_model(onnx_model, args.calib, args.calib_method, max_samples=args.calib_samples,
                                    exclude=args.int8_exclude or ())
    if int8_model is not None:
        runtimes["onnxruntime int8"] = onnxruntime_session(int8_model, threads, spinning)
    times = time_alternating(runtimes, feed, threads, args.warmup, args.repeat)
    print(f"{'':18}{'median ms':>10}{'p90 ms':>10}{'min ms':>10}")
    for name, lat in times.items():
        print(f"{name:18}{lat.median_ms:10.2f}{lat.p90_ms:10.2f}{lat.min_ms:10.2f}")
    for name in list(times)[1:]:
        label = name.replace("onnxruntime", "ONNX Runtime")
        print(f"{label} / {ours}: {times[name].median_ms / times[ours].median_ms:.3f}x (above 1: tvm_fuse is faster)")
    abs_diff, rel_diff = differences(model.run(None, feed), session.run(None, feed))
    print(f"max abs output difference{' from ONNX Runtime fp32' if args.int8 else ''}: {abs_diff:.3g} "
          f"(relative to the largest output: {rel_diff:.3g})")
    return 0


def _ort_int8_left_out(args) -> str | None:
    """Why `bench --int8` cannot make ONNX Runtime's int8 model, or None when it can."""
    if not args.calib:
        return "no --calib samples to calibrate it on"
    if Path(args.calib).suffix == ".json":
        return "ONNX Runtime calibrates on samples, and --calib is a table"
    return None


def cmd_explain(args) -> int:
    model = artifact.load(args.model) if args.model.endswith(".so") else _build(args)
    report = model.fusion_report()
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(FusionReport.from_json(report).summary())
    return 0


def _int8_arguments(sub: argparse.ArgumentParser, switch: bool = True) -> None:
    if switch:
        sub.add_argument("--int8", action="store_true", help="run the conv kernels (and dense layers) in int8 (needs --calib, "
                                                                 "or --int8-activations dynamic; a pre-quantized QDQ model "
                                                                 "runs in int8 without either)")
        sub.add_argument("--int8-activations", choices=ACTIVATIONS, default="static",
                         help="static: scales calibrated on --calib (default); dynamic: no --calib, the dense layers "
                              "(Gemm, MatMul with constant weights) quantize their input at run time, a scale per 64 values "
                              "of a row, and convs stay fp32")
    sub.add_argument("--calib", metavar="PATH",
                     help="calibration samples: a .npy of the input stacked along the batch axis, a .npz with one "
                          "entry per input, a folder of either; or a .json table from `tvm-fuse quantize`")
    sub.add_argument("--calib-method", choices=METHODS, default="entropy",
                     help="how each tensor's range is chosen (default entropy)")
    sub.add_argument("--calib-samples", type=int, metavar="N", help="calibrate on at most N batches")
    sub.add_argument("--int8-exclude", action="append", metavar="NODE_OR_OP",
                     help="ONNX node name or op type to keep in fp32 (repeatable)")


def cmd_quantize(args) -> int:
    if not args.calib:
        raise InputError("quantize needs --calib PATH (.npy, .npz or a folder of them)")
    table = quantize(_load_onnx(args.model, args.batch), args.calib, method=args.calib_method,
                     exclude=args.int8_exclude or (), max_samples=args.calib_samples,
                     input_shapes=dict(args.input_shape or []))
    output = Path(args.output or Path(args.model).stem + ".calib.json")
    table.save(output)
    print(f"{len(table.tensors)} tensor scales from {table.samples} batches ({table.method}) -> {output}")
    return 0


def cmd_cache(args) -> int:
    folder = cache.cache_dir(args.cache_dir)
    if folder is None:
        raise InputError(f"no cache folder: pass --cache-dir DIR or set {cache.ENV_CACHE_DIR}")
    if args.action == "clear":
        print(f"removed {cache.clear(folder)} entries from {folder}")
        return 0
    listed = cache.entries(folder)
    for entry in listed:
        shapes = " ".join(f"{n}={','.join(map(str, s))}" for n, s in entry.get("input_shapes", {}).items())
        print(f"{entry['key'][:16]}  {entry['bytes'] / 2**20:8.1f} MiB  {entry.get('created', '?'):24}  "
              f"{entry.get('model', '?')}  {entry.get('precision', '?')}{' int8' if entry.get('quantize') else ''}  "
              f"{entry.get('target', '?')}{'  ' + shapes if shapes else ''}")
    total = sum(entry["bytes"] for entry in listed)
    print(f"{len(listed)} entries, {total / 2**20:.1f} MiB in {folder}")
    return 0


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(
        prog="tvm-fuse",
        description="Compile ONNX models with Apache TVM into fast x86 CPU code.",
    )
    commands = top.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name, func, help_text, model_default=None):
        sub = commands.add_parser(name, help=help_text, description=help_text)
        if model_default:
            sub.add_argument("model", nargs="?", default=model_default, help=f"{_MODEL_HELP} (default: {model_default})")
        else:
            sub.add_argument("model", help=_MODEL_HELP)
        sub.add_argument("--target", default="native", help=_TARGET_HELP)
        sub.add_argument("--input-shape", action="append", type=_shape_arg, metavar="NAME=D1,D2,...",
                         help="static shape for an input: its symbolic or -1 dims, and its batch (axis 0) where the "
                              "graph allows (repeatable)")
        sub.add_argument("--batch", type=int, default=1, help="batch size for the named models (default 1)")
        sub.add_argument("--disable-fusion", action="append", metavar="FAMILY",
                         help=f"leave a fusion family unfused (repeatable): {', '.join(FAMILIES)}, or all; "
                              "TVM_FUSE_DISABLE_FUSE_<FAMILY>=1 does the same")
        if name != "tune":
            sub.add_argument("--tuning-logs", action="append", metavar="PATH",
                             help=f"tuning log or folder of *.jsonl logs (repeatable); default: ${ENV_LOGS}, "
                                  "else the logs shipped with tvm_fuse")
        if name != "quantize":
            _int8_arguments(sub)
        if name != "quantize":
            sub.add_argument("--precision", choices=PRECISIONS, default="fp32",
                             help="bf16: conv and dense kernels multiply in bf16 and add in fp32, on AVX512-BF16's "
                                  "vdpbf16ps, or on AMX tiles (tdpbf16ps) where the target has AMX-BF16 (targets "
                                  "without AVX512-BF16 build in fp32, with a warning); with --int8, what int8 leaves "
                                  "(a transformer's attention products) runs in bf16; default fp32, exact")
        sub.add_argument("--no-winograd", action="store_true",
                         help=f"run 3x3 convs as direct convs, never Winograd; {WINOGRAD_SWITCH}=1 does the same")
        if name not in ("tune", "quantize"):
            sub.add_argument("--cache-dir", metavar="DIR", help=_CACHE_HELP)
        sub.set_defaults(func=func)
        return sub

    build = command("build", cmd_build, "compile a model and export it as a shared library")
    build.add_argument("-o", "--output", help="library path (default: MODEL's name with .so); its weights go beside it "
                       "as .weights, its metadata as .json")
    build.epilog = ("tvm_fuse.load(OUTPUT) serves the export in Python; a process that sets TVM_USE_RUNTIME_LIB=1 "
                    "loads TVM's runtime alone for it (120 MB less memory; it cannot compile)")
    build.add_argument("--timings", action="store_true",
                       help="print the seconds of each phase of the build (import, canonicalize, layout, fuse, "
                            "schedule kernels, legalize, Relax finalize, code generation (TIR lowering and LLVM, "
                            "on every core), "
                            "calibration, the cache), as `fusion_report()['build_seconds']` "
                            "holds them")

    run = command("run", cmd_run, "run a model (.onnx, a named model, or an exported .so) and print its outputs")
    run.add_argument("--input", action="append", type=_input_arg, metavar="NAME=FILE.npy",
                     help="an input from a .npy file (repeatable); random inputs if none")
    run.add_argument("--output-dir", type=Path, help="also save each output as NAME.npy here")

    explain = command("explain", cmd_explain, "list the fused kernels and why each other ONNX node was left unfused")
    explain.add_argument("--json", action="store_true",
                         help='print JSON: {"kernels": [{"name", "pattern", "onnx_nodes"}], "unfused": '
                              '[{"onnx_node", "op_type", "reason"}], "folded": [...], "layout_transforms": N}')

    quantize_ = command("quantize", cmd_quantize, "calibrate a model for int8 and save its table of tensor scales")
    _int8_arguments(quantize_, switch=False)
    quantize_.add_argument("-o", "--output", help="table path (default: MODEL's name with .calib.json); "
                                                  "build with --int8 --calib TABLE")

    tune_ = command("tune", cmd_tune, "measure knob settings of the model's kernels and append them to a tuning log")
    tune_.add_argument("--trials", type=int, default=100, help="new settings to measure, over all kernels (default 100)")
    tune_.add_argument("--log-dir", default="tuning_logs",
                       help="where the log goes, one file per CPU: <isa class>-<mcpu>.jsonl (default tuning_logs)")
    tune_.add_argument("--timeout", type=float, default=60.0,
                       help="seconds a candidate may take to build and run before it is recorded as failed (default 60)")
    tune_.add_argument("--repeat", type=int, default=10, help="timed runs per candidate, median kept (default 10)")
    tune_.add_argument("--rpc-tracker", metavar="HOST:PORT",
                       help="measure on the machines of this TVM RPC tracker (with --rpc-key; --target describes them)")
    tune_.add_argument("--rpc-key", metavar="KEY", help="the tracker's key for those machines")
    tune_.add_argument("--plot", metavar="FILE.png", help="write a PNG of each kernel's best latency so far vs trials "
                                                          "(needs matplotlib: pip install 'tvm_fuse[bench]')")

    bench = command("bench", cmd_bench, "time a model against ONNX Runtime and OpenVINO in fp32 and in each "
                    "precision the target runs (bf16, int8), same inputs and threads", DEFAULT_MODEL)
    bench.set_defaults(precision=None)
    bench.epilog = ("By default tvm_fuse runs in fp32, in bf16 where the target has AVX512-BF16, and in int8 where it "
                    f"has AVX2 or AVX-512, the int8 build calibrated on {BENCH_CALIBRATION_FEEDS} seeded random inputs; "
                    "ONNX Runtime in fp32 and in int8 (its quantize_static model on the same inputs), OpenVINO, where "
                    "installed, in f32, bf16 (its precision hint) and int8 (NNCF on the same inputs); all take turns. "
                    "--precision or --int8 times that one precision instead. "
                    "With --int8 --calib SAMPLES, tvm_fuse runs in int8 and ONNX Runtime both in fp32 and in int8: "
                    f"its quantize_static model ({ORT_INT8_SCHEME}) calibrated on the same samples with the same "
                    "--calib-method, --calib-samples and --int8-exclude. A --calib table has no samples for ONNX "
                    "Runtime to calibrate on: it then runs in fp32 only.")
    bench.add_argument("--threads", type=int, help="threads for every runtime (default: one per core)")
    bench.add_argument("--repeat", type=int, default=20, help="timed runs of each runtime (default 20)")
    bench.add_argument("--warmup", type=int, default=3, help="untimed runs first (default 3)")
    bench.add_argument("--no-ort", action="store_true", help="time tvm_fuse alone (no ONNX Runtime or OpenVINO)")
    bench.add_argument("--no-spinning", action="store_true",
                       help="idle threads of both runtimes sleep at once instead of spinning between kernels "
                            "(tvm_fuse.set_spinning(False); ONNX Runtime's session.intra_op.allow_spinning 0): "
                            "for cores shared with other busy processes")
    cache_ = commands.add_parser("cache", help="list or clear the build cache",
                                 description="list the builds kept in the build cache (key, size, when, model, "
                                             "precision, target, input shapes), or remove them all")
    cache_.add_argument("action", choices=("ls", "clear"))
    cache_.add_argument("--cache-dir", metavar="DIR", help=f"the cache folder (default: ${cache.ENV_CACHE_DIR})")
    cache_.set_defaults(func=cmd_cache)
    return top


def main(argv=None) -> int:
    args = parser().parse_args(argv)
    if getattr(args, "no_winograd", False):
        os.environ[WINOGRAD_SWITCH] = "1"
    try:
        return args.func(args)
    except (TvmFuseError, ValueError, ImportError) as error:
        print(f"tvm-fuse {args.command}: error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
