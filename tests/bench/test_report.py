"""bench/report.py writes docs/benchmarks.md and the README's figures from saved results: each
table as `bench/tables.py` defines it, its ratios computed from the rows, columns no row has
left out, and the machine, date and command of each result file."""

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[2] / "bench"))
import report  # noqa: E402
import tables  # noqa: E402

MACHINE = {"cpu": "AMD EPYC", "llvm_cpu": "znver5", "features": ["avx2", "avx512_vnni", "avx512f"], "cores": 2}


def _save(folder: Path, name: str, rows: list[dict], **extra) -> None:
    (folder / f"{name}.json").write_text(json.dumps(
        {"date": "2026-11-28T10:00:00+00:00", "machine": MACHINE, "command": f"python bench/{name}.py", **extra,
         "rows": rows}))


def test_a_table_computes_its_ratios_and_leaves_out_empty_columns():
    rows = [{"model": "a", "fp32": 2.0, "openvino": 0.5}, {"model": "b", "fp32": 3.0}]
    text = tables.markdown(rows, tables.BUILD_TIMES)
    head, rule, first, second = text.split("\n\n")[0].splitlines()
    assert head == "| model | fp32 s | OpenVINO compile s | fp32 / OpenVINO |"
    assert first == "| a | 2.00 | 0.50 | 4.00 |" and second == "| b | 3.00 |  |  |"


def test_the_page_has_each_saved_result_with_its_machine_and_command(tmp_path):
    _save(tmp_path, "models", [{"model": "resnet50", "batch": 1, "tvm_fuse_ms": 10.0, "onnxruntime_ms": 12.0,
                                "ratio": 1.2}], geomean_ratio_cnn_batch1=1.2)
    _save(tmp_path, "throughput", [{"model": "resnet50", "precision": "int8", "tvm_fuse_per_s": 200.0,
                                    "openvino_per_s": 160.0, "vs_openvino": 1.25}])
    page = report.page(tmp_path)
    assert "## Latency, fp32" in page and "## Throughput and memory" in page and "## int8" not in page
    assert "AMD EPYC (LLVM `znver5`), 2 cores, avx512_vnni, avx512f, 2026-11-28: `python bench/models.py`" in page
    assert "| resnet50 | 1 | 10.00 | 12.00 | 1.20 |" in page
    assert "Geomean over the CNNs at batch 1: ORT / ours 1.20." in page
    assert "| resnet50 | int8 | 200.0 | 160.0 | 1.25 |" in page
    assert report.headline(tmp_path).startswith("- ResNet-50 fp32, batch 1: 10.00 ms; ONNX Runtime / ours 1.20")


def test_the_readme_block_is_replaced_and_the_rest_kept(tmp_path, monkeypatch):
    _save(tmp_path, "models", [{"model": "resnet50", "batch": 1, "tvm_fuse_ms": 10.0, "onnxruntime_ms": 12.0,
                                "ratio": 1.2}])
    readme = tmp_path / "README.md"
    readme.write_text(f"intro\n{report.README_START}\nold figures\n{report.README_END}\nrest\n")
    monkeypatch.setattr(sys, "argv", ["report.py", "--results", str(tmp_path), "--docs", str(tmp_path / "b.md"),
                                      "--readme", str(readme)])
    report.main()
    text = readme.read_text()
    assert text.startswith("intro\n") and text.endswith(f"{report.README_END}\nrest\n")
    assert "old figures" not in text and "ResNet-50 fp32" in text
    with pytest.raises(ValueError):  # a README without the markers is not written over
        readme.write_text("no markers\n")
        report.main()


def test_the_readme_lines_name_their_machine_where_two_measured_them(tmp_path):
    _save(tmp_path, "models", [{"model": "resnet50", "batch": 1, "tvm_fuse_ms": 10.0, "onnxruntime_ms": 12.0}])
    (tmp_path / "throughput.json").write_text(json.dumps(
        {"date": "2026-11-29T10:00:00+00:00", "machine": {**MACHINE, "llvm_cpu": "znver4"}, "command": "x",
         "rows": [{"model": "resnet50", "precision": "fp32", "tvm_fuse_per_s": 30.0, "vs_openvino": 1.2}]}))
    lines = report.headline(tmp_path).splitlines()
    assert lines[0].endswith("[1]") and lines[1].endswith("[2]")
    assert "[1] Measured on AMD EPYC (LLVM `znver5`)" in lines[3] and "[2] Measured on AMD EPYC (LLVM `znver4`)" in lines[5]
    (tmp_path / "throughput.json").unlink()
    assert not report.headline(tmp_path).splitlines()[0].endswith("]")  # one machine: no numbers
