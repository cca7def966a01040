"""The build cache (`build(cache_dir=...)`, `tvm_fuse.cache`): a hit loads the kept build, with
the same outputs, instead of compiling; any change of model, option or tuning record misses;
concurrent builds and broken entries are safe."""

from __future__ import annotations

import multiprocessing

import numpy as np
import pytest

import tvm_fuse
from tests.conftest import assert_close, ort_outputs, tiny_model
from tvm_fuse import api, cache
from tvm_fuse.cli import main
from tvm_fuse.tuning.database import log_paths

FEED = {"x": np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4)}
BF16_TARGET = "llvm -mcpu=cooperlake"  # AVX512-BF16: every option below builds for it; nothing here runs it


def _count_compiles(monkeypatch) -> list:
    """A list that grows by one each time `build` compiles."""
    compiles, compile_ = [], api._compile
    monkeypatch.setattr(api, "_compile", lambda *a, **k: compiles.append(1) or compile_(*a, **k))
    return compiles


@pytest.mark.avx2
def test_a_hit_loads_the_kept_build_with_identical_outputs(tmp_path, monkeypatch):
    compiles = _count_compiles(monkeypatch)
    fresh = tvm_fuse.build(tiny_model(), cache_dir=tmp_path)
    kept = tvm_fuse.build(tiny_model(), cache_dir=tmp_path)
    assert len(compiles) == 1
    assert np.array_equal(kept.run(None, FEED)[0], fresh.run(None, FEED)[0])
    assert_close(kept.run(None, FEED), ort_outputs(tiny_model(), FEED))
    fresh_report, kept_report = fresh.fusion_report(), kept.fusion_report()
    assert "code generation" in fresh_report.pop("build_seconds")
    assert set(kept_report.pop("build_seconds")) == {"cache lookup", "other"}  # the hit's own time
    assert kept_report == fresh_report
    assert [entry["model"] for entry in cache.entries(tmp_path)] == ["tiny"]


def test_the_environment_names_the_cache(tmp_path, monkeypatch):
    compiles = _count_compiles(monkeypatch)
    monkeypatch.setenv(cache.ENV_CACHE_DIR, str(tmp_path))
    tvm_fuse.build(tiny_model(), BF16_TARGET)
    tvm_fuse.build(tiny_model(), BF16_TARGET)
    assert len(compiles) == 1 and len(cache.entries(tmp_path)) == 1


@pytest.mark.parametrize("change", ["model", "target", "input_shapes", "disable_fusion", "precision",
                                    "quantize", "tuning_record", "winograd_switch", "code"])
def test_any_change_misses(change, tmp_path, monkeypatch):
    logs = tmp_path / "logs.jsonl"
    record = log_paths()[0].read_text().splitlines()[0]  # a real record, for a kernel this model lacks
    logs.write_text(record + "\n")
    options = {"tuning_logs": logs, "cache_dir": tmp_path / "cache"}
    tvm_fuse.build(tiny_model(), BF16_TARGET, **options)
    model, target = tiny_model(), BF16_TARGET
    if change == "model":
        model = tiny_model(op="Sigmoid")
    elif change == "target":
        target += " -num-cores=2"
    elif change == "input_shapes":
        options["input_shapes"] = {"x": (3, 4)}
    elif change == "disable_fusion":
        options["disable_fusion"] = "all"
    elif change == "precision":
        options["precision"] = "bf16"
    elif change == "quantize":
        options["quantize"] = tvm_fuse.QuantConfig(activations="dynamic")
    elif change == "tuning_record":
        logs.write_text(record + "\n" + record + "\n")
    elif change == "winograd_switch":
        monkeypatch.setenv("TVM_FUSE_DISABLE_WINOGRAD", "1")
    elif change == "code":  # a checkout or upgrade whose code changed under the same version
        monkeypatch.setattr(cache, "_code_digest", lambda: "0" * 64)
    compiles = _count_compiles(monkeypatch)
    tvm_fuse.build(model, target, **options)
    assert len(compiles) == 1
    assert len(cache.entries(tmp_path / "cache")) == 2


def test_calibration_samples_are_keyed_by_their_values(tmp_path, monkeypatch):
    compiles = _count_compiles(monkeypatch)
    rng = np.random.default_rng(0)
    samples = [{"x": rng.standard_normal((3, 4)).astype(np.float32)} for _ in range(2)]
    for calibration in (samples, iter(samples), [{"x": samples[0]["x"] * 2}, samples[1]]):
        tvm_fuse.build(tiny_model(), BF16_TARGET, quantize=tvm_fuse.QuantConfig(calibration=calibration),
                       input_shapes={"x": (3, 4)}, cache_dir=tmp_path)
    # The generator of the same samples hits (the key lists it once and calibration reads that
    # list); other values miss.
    assert len(compiles) == 2


def _build_in_child(folder: str) -> None:
    tvm_fuse.build(tiny_model(), BF16_TARGET, cache_dir=folder)


def test_two_processes_building_one_model_at_once_both_succeed(tmp_path):
    context = multiprocessing.get_context("spawn")
    children = [context.Process(target=_build_in_child, args=(str(tmp_path),)) for _ in range(2)]
    for child in children:
        child.start()
    for child in children:
        child.join(timeout=300)
    assert [child.exitcode for child in children] == [0, 0]
    assert len(cache.entries(tmp_path)) == 1
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no staging folder left behind
    assert tvm_fuse.build(tiny_model(), BF16_TARGET, cache_dir=tmp_path).target


@pytest.mark.parametrize("damage", ["truncated", "missing"])
def test_a_broken_entry_is_rebuilt_with_a_warning(damage, tmp_path, monkeypatch):
    tvm_fuse.build(tiny_model(), BF16_TARGET, cache_dir=tmp_path)
    (entry,) = [p for p in tmp_path.iterdir()]
    library = entry / cache.LIBRARY
    if damage == "truncated":
        library.write_bytes(library.read_bytes()[:1000])
    else:
        library.unlink()
    compiles = _count_compiles(monkeypatch)
    with pytest.warns(UserWarning, match="does not load"):
        tvm_fuse.build(tiny_model(), BF16_TARGET, cache_dir=tmp_path)
    assert len(compiles) == 1
    assert library.stat().st_size > 1000  # the rebuilt entry replaced it


def test_cache_ls_and_clear(tmp_path, capsys):
    tvm_fuse.build(tiny_model(), BF16_TARGET, cache_dir=tmp_path)
    assert main(["cache", "ls", "--cache-dir", str(tmp_path)]) == 0
    listed = capsys.readouterr().out
    assert "tiny" in listed and "cooperlake" in listed and "1 entries" in listed
    assert main(["cache", "clear", "--cache-dir", str(tmp_path)]) == 0
    assert "removed 1 entries" in capsys.readouterr().out
    assert cache.entries(tmp_path) == []


def test_a_models_external_data_is_part_of_its_key(tmp_path, monkeypatch):
    import onnx

    path = tmp_path / "model.onnx"
    onnx.save(tiny_model(), path, save_as_external_data=True, all_tensors_to_one_file=True,
              location="weights.bin", size_threshold=0)
    compiles = _count_compiles(monkeypatch)
    tvm_fuse.build(path, BF16_TARGET, cache_dir=tmp_path / "cache")
    tvm_fuse.build(path, BF16_TARGET, cache_dir=tmp_path / "cache")
    weights = tmp_path / "weights.bin"
    weights.write_bytes(bytes(reversed(weights.read_bytes())))  # other weights, the same .onnx file
    tvm_fuse.build(path, BF16_TARGET, cache_dir=tmp_path / "cache")
    assert len(compiles) == 2

