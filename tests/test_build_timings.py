"""Build timings (`tvm_fuse.build_timings`): every build reports its seconds per phase, which add
up to the build, and `tvm-fuse build --timings` prints them."""

from __future__ import annotations

import time

import pytest

import tvm_fuse
from tests.conftest import AVX512_TARGET, tiny_model
from tvm_fuse.build_timings import phase, recording
from tvm_fuse.cli import main


def test_a_builds_phases_add_up_to_its_time():
    start = time.perf_counter()
    seconds = tvm_fuse.build(tiny_model(), AVX512_TARGET).fusion_report()["build_seconds"]
    elapsed = time.perf_counter() - start
    for name in ("import", "canonicalize", "layout", "fuse", "schedule kernels", "legalize", "Relax finalize",
                 "code generation"):
        assert name in seconds
    assert all(value >= 0 for value in seconds.values())
    assert sum(seconds.values()) == pytest.approx(elapsed, abs=0.05)


def test_a_phase_leaves_out_the_phases_nested_in_it():
    with recording() as seconds:
        with phase("outer"):
            time.sleep(0.02)
            with phase("inner"):
                time.sleep(0.05)
    assert list(seconds) == ["outer / inner", "outer", "other"]
    assert seconds["outer / inner"] >= 0.05 and 0.02 <= seconds["outer"] < 0.05


def test_build_timings_prints_the_phases(tmp_path, capsys):
    import onnx

    onnx.save(tiny_model(), tmp_path / "tiny.onnx")
    assert main(["build", str(tmp_path / "tiny.onnx"), "--target", AVX512_TARGET, "-o", str(tmp_path / "m.so"),
                 "--timings"]) == 0
    printed = capsys.readouterr().out
    assert "code generation" in printed and "build" in printed
