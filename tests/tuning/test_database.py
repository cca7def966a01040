"""Builds take the best record for their CPU, else the nearest compatible one, else none."""

from __future__ import annotations

from pathlib import Path

import pytest

import tvm_fuse.tuning_logs
from tvm_fuse.errors import TvmFuseError
from tvm_fuse.tuning.database import ENV_LOGS, TuningDatabase, log_paths
from tvm_fuse.tuning.records import Record, append


def _record(isa, mcpu, ms, tile=1):
    return Record("w", isa, mcpu, {"tile": tile}, ms)


def test_the_fastest_record_of_the_same_cpu_wins():
    db = TuningDatabase([_record("avx512", "skylake-avx512", 2.0, 1), _record("avx512", "skylake-avx512", 1.0, 2),
                         _record("avx512", "icelake-server", 0.5, 3), Record("w", "avx512", "skylake-avx512", {}, None, "crashed")])
    assert db.lookup("w", "avx512", "skylake-avx512").knobs == {"tile": 2}
    assert db.lookup("w", "avx512", "cascadelake").knobs == {"tile": 3}  # same class, another CPU
    assert db.lookup("other", "avx512", "skylake-avx512") is None


def test_a_vnni_cpu_falls_back_to_avx512_records_but_avx512_never_to_avx2():
    db = TuningDatabase([_record("avx512", "skylake-avx512", 1.0, 1), _record("avx2", "haswell", 1.0, 2)])
    assert db.lookup("w", "avx512-vnni", "cascadelake").knobs == {"tile": 1}
    assert db.lookup("w", "amx", "sapphirerapids").knobs == {"tile": 1}
    assert db.lookup("w", "avx2", "haswell").knobs == {"tile": 2}
    assert TuningDatabase([_record("avx2", "haswell", 1.0)]).lookup("w", "avx512", "skylake-avx512") is None


def test_logs_come_from_the_argument_then_the_environment_then_the_package(tmp_path, monkeypatch):
    given, from_env = tmp_path / "given.jsonl", tmp_path / "env"
    from_env.mkdir()
    append(given, _record("avx512", "x", 1.0))
    append(from_env / "a.jsonl", _record("avx512", "x", 1.0))
    monkeypatch.setenv(ENV_LOGS, str(from_env))
    assert log_paths(given) == [given]
    assert log_paths() == [from_env / "a.jsonl"]
    monkeypatch.delenv(ENV_LOGS)
    assert log_paths() == sorted(Path(tvm_fuse.tuning_logs.__file__).parent.glob("*.jsonl"))
    with pytest.raises(TvmFuseError, match="does not exist"):
        log_paths(tmp_path / "missing.jsonl")


def test_logs_are_read_once_until_they_change(tmp_path):
    """A process that builds many models parses the logs once; a record appended (a tuning job
    in another process) is seen by the next build."""
    path = tmp_path / "log.jsonl"
    append(path, _record("avx512", "skylake-avx512", 2.0, 1))
    first = TuningDatabase.load([path])
    assert TuningDatabase.load([str(path)]) is first
    append(path, _record("avx512", "skylake-avx512", 1.0, 2))
    again = TuningDatabase.load([path])
    assert again is not first and again.lookup("w", "avx512", "skylake-avx512").knobs == {"tile": 2}
