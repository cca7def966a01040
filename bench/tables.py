"""The benchmarks' tables, as data: each a list of columns over the rows a script saves to
bench/results (`save`: with the date and the machine), printed as Markdown, the same text in the
terminal and in docs/benchmarks.md (`bench/report.py`). A column none of the rows has a value
for is left out."""

from __future__ import annotations

import datetime
import json
import math
import platform
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import tvm_fuse
from tvm_fuse.target import host_cores, host_cpu

RESULTS = Path(__file__).parent / "results"


def cpu_model() -> str:
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
        return next(line.split(":", 1)[1].strip() for line in lines if line.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor()


def machine() -> dict:
    return {"cpu": cpu_model(), "llvm_cpu": host_cpu(), "features": sorted(tvm_fuse.host_features()),
            "cores": host_cores()}


def save(out: Path, name: str, rows: list[dict], command: str, **extra) -> Path:
    """`rows` as `out/name.json`, with the date, the machine and the `command` that measured them."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{name}.json"
    path.write_text(json.dumps({"date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
                                "machine": machine(), "command": command, **extra, "rows": rows}, indent=2) + "\n")
    return path


@dataclass(frozen=True)
class Column:
    head: str
    value: Callable[[dict], float | str | None]  # None: a blank cell
    format: str = "{:.2f}"


@dataclass(frozen=True)
class Table:
    columns: list[Column]
    note: str = ""  # what the columns mean, under the table


def key(name: str, head: str | None = None, format: str = "{:.2f}") -> Column:
    return Column(head or name, lambda row: row.get(name), format)


def ratio(numerator: str, denominator: str, head: str) -> Column:
    """`numerator / denominator` of a row (above 1: the denominator's runtime is faster)."""
    return Column(head, lambda row: row[numerator] / row[denominator]
                  if row.get(numerator) and row.get(denominator) else None)


def percent(name: str, head: str) -> Column:
    return Column(head, lambda row: None if row.get(name) is None else 100 * row[name], "{:.1f}%")


def geomean(values) -> float | None:
    values = [v for v in values if v]
    return math.exp(sum(map(math.log, values)) / len(values)) if values else None


def markdown(rows: list[dict], table: Table) -> str:
    columns = [c for c in table.columns if any(c.value(row) is not None for row in rows)]
    lines = ["| " + " | ".join(c.head for c in columns) + " |", "|" + "---|" * len(columns)]
    for row in rows:
        cells = [c.value(row) for c in columns]
        lines.append("| " + " | ".join("" if v is None else v if isinstance(v, str) else c.format.format(v)
                                       for c, v in zip(columns, cells)) + " |")
    return "\n".join(lines) + (f"\n\n{table.note}" if table.note else "")


def host(machine: dict) -> str:
    """The line saying which machine measured a table."""
    return (f"{machine.get('cpu', '?')} (LLVM `{machine.get('llvm_cpu', '?')}`), {machine.get('cores', '?')} cores, "
            f"{', '.join(f for f in machine.get('features', []) if f.startswith(('avx512', 'amx')))}")


# bench/models.py
LATENCY = Table([
    key("model"), key("batch", format="{}"), key("gflops", "GFLOPs"),
    key("tvm_fuse_ms", "ours ms"), key("onnxruntime_ms", "ORT ms"), key("ratio", "ORT / ours"),
    key("openvino_ms", "OpenVINO ms"), key("ratio_openvino", "OpenVINO / ours"),
    key("tvm_fuse_pct_peak", "ours % peak", "{:.1f}"), key("onnxruntime_pct_peak", "ORT % peak", "{:.1f}"),
    key("compile_s", "build s", "{:.1f}"), key("max_rel_diff", "max rel diff", "{:.1e}"),
], "Medians of the timed runs, every runtime taking turns; ratios above 1: tvm_fuse is faster. "
   "% peak: the model's FLOPs (as direct convolutions: Winograd does fewer, so above 100% can be) over the "
   "machine's measured fp32 FMA peak. max rel diff: the largest output difference from ONNX "
   "Runtime, relative to the output's largest magnitude.")

BF16 = Table([
    key("model"), key("batch", format="{}"), key("tvm_fuse_ms", "ours fp32 ms"), key("ours_bf16_ms", "ours bf16 ms"),
    key("openvino_bf16_ms", "OpenVINO bf16 ms"), key("ours_bf16_speedup", "fp32 / bf16"),
    ratio("openvino_bf16_ms", "ours_bf16_ms", "OpenVINO bf16 / ours"),
    key("ours_bf16_max_rel_diff", "ours err", "{:.1e}"), key("openvino_bf16_max_rel_diff", "OpenVINO err", "{:.1e}"),
    percent("ours_bf16_top1_agreement", "top-1 ours"), percent("openvino_bf16_top1_agreement", "top-1 OpenVINO"),
], "err: the largest output difference from ONNX Runtime fp32, relative to the output's largest magnitude; "
   "top-1: the share of random inputs on which each bf16 build's top-1 class is its own fp32 build's.")

INT8 = Table([
    key("model"), key("batch", format="{}"), key("int8_kernels", "int8 kernels", "{}"),
    key("tvm_fuse_ms", "ours fp32 ms"), key("tvm_fuse_int8_ms", "ours int8 ms"),
    key("onnxruntime_int8_ms", "ORT int8 ms"), key("openvino_int8_ms", "OpenVINO int8 ms"),
    key("int8_speedup", "fp32 / int8"), key("ratio_int8", "ORT int8 / ours"),
    key("ratio_openvino_int8", "OpenVINO int8 / ours"),
    Column("top-1 ours", lambda r: 100 * r["top1_agreement"]["tvm_fuse"] if r.get("top1_agreement") else None,
           "{:.1f}%"),
    Column("top-1 ORT", lambda r: 100 * r["top1_agreement"]["onnxruntime"] if r.get("top1_agreement") else None,
           "{:.1f}%"),
], "Each runtime calibrated on the same random feeds: ORT int8 is ONNX Runtime's static QDQ model, OpenVINO int8 "
   "NNCF's post-training quantization. top-1: the share of random inputs on whose argmax each int8 model agrees "
   "with its own fp32 model.")

TRANSFORMERS = Table([
    key("model"), key("batch", format="{}"), key("tvm_fuse_ms", "ours ms"), key("onnxruntime_ms", "ORT ms"),
    key("openvino_ms", "OpenVINO ms"), key("tvm_fuse_dynamic_int8_ms", "ours int8 ms"),
    key("onnxruntime_dynamic_int8_ms", "ORT int8 ms"), key("ratio", "ORT / ours"),
    key("ratio_openvino", "OpenVINO / ours"),
    ratio("onnxruntime_dynamic_int8_ms", "tvm_fuse_dynamic_int8_ms", "ORT int8 / ours int8"),
    ratio("tvm_fuse_any_length_ms", "tvm_fuse_ms", "any length / this length"),
    key("tvm_fuse_dynamic_int8_max_rel_diff", "ours int8 err", "{:.1e}"),
    key("onnxruntime_dynamic_int8_max_rel_diff", "ORT int8 err", "{:.1e}"),
    key("tvm_fuse_dynamic_int8_bf16_ms", "ours int8+bf16 ms"),
    key("tvm_fuse_of_ort_int8_ms", "ours of ORT int8 ms"),
    ratio("onnxruntime_dynamic_int8_ms", "tvm_fuse_of_ort_int8_ms", "ORT int8 / ours of it"),
    key("tvm_fuse_of_ort_int8_max_rel_diff", "ours of it vs ORT int8", "{:.1e}"),
], "int8: dynamic (ours: `QuantConfig(activations='dynamic')`, a scale per group of 64 values of a row; ONNX "
   "Runtime's quantize_dynamic, one per tensor). any length: our one build for every sequence length against "
   "the build for this one. err: against ONNX Runtime fp32. ours of ORT int8: our build of ONNX Runtime's "
   "quantize_dynamic model as it is (its MatMulIntegers on our int8 kernels), its difference against ONNX "
   "Runtime's run of that model.")

# bench/throughput.py
THROUGHPUT = Table([
    key("model"), key("precision"), key("tvm_fuse_per_s", "ours /s", "{:.1f}"),
    key("openvino_per_s", "OpenVINO /s", "{:.1f}"), key("vs_openvino", "ours / OpenVINO"),
    key("onnxruntime_per_s", "ORT /s", "{:.1f}"), key("vs_onnxruntime", "ours / ORT"),
    key("tvm_fuse_peak_mb", "ours MB", "{:.0f}"), key("openvino_peak_mb", "OpenVINO MB", "{:.0f}"),
    key("onnxruntime_peak_mb", "ORT MB", "{:.0f}"), key("build_peak_mb", "our build MB", "{:.0f}"),
    key("max_rel_diff", "max rel diff", "{:.1e}"),
], "Batch 1, images per second over every core (higher is better); MB: the peak resident memory of each "
   "serving process (ours: loading the exported library with TVM's runtime alone, TVM_USE_RUNTIME_LIB=1).")

# bench/kernel_times.py
KERNEL_TIMES = Table([
    key("model"), key("precision"), key("threads", format="{}"), key("kernel"), key("calls", format="{}"),
    key("ms", "ms per run", "{:.3f}"), percent("share", "share of the run"), key("gops", "GOP/s", "{:.0f}"),
    percent("of_peak", "of the unit's peak"),
], "Each kernel's time inside a run (the median of its calls), the conv and dense kernels' speed as 2 x the "
   "multiply-adds of the ONNX nodes they compute per second (a Winograd kernel's may pass the peak), and for "
   "the matrix kernels (not depthwise) that speed against the measured peak of the unit the precision runs on "
   "(fp32 FMA, VNNI, AVX512-BF16, AMX), "
   "same threads; then the matrix kernels together (against the peaks: their time at the peaks over the "
   "time taken), the rest of the run, and a run without the instrument (which adds under a microsecond to "
   "each call's figure).")

# bench/build_times.py
BUILD_TIMES = Table([
    key("model"), key("fp32", "fp32 s"), key("bf16", "bf16 s"), key("int8", "int8 s"),
    key("cache hit", "cache hit s"), key("onnxruntime", "ORT session s"), key("openvino", "OpenVINO compile s"),
    ratio("fp32", "openvino", "fp32 / OpenVINO"), ratio("fp32", "onnxruntime", "fp32 / ORT"),
], "Seconds from the ONNX model to a model ready to run, one process, one runtime after another.")

# bench/corpus.py
CORPUS = Table([
    key("name", "model"), key("package"), key("input"),
    Column("status", lambda r: r["status"] + (f": {r['error']}" if "error" in r else "")),
    key("mismatch", "diff / tolerance", "{:.1e}"), key("sensitivity", "ORT's own", "{:.1e}"),
    key("build_s", "build s", "{:.1f}"), key("weights_ratio", "weights / ONNX"), key("ours_ms", "ours ms"),
    ratio("ort_ms", "ours_ms", "ORT / ours"), ratio("openvino_ms", "ours_ms", "OpenVINO / ours"),
])
