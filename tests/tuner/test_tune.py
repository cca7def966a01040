"""A tiny tuning job end to end: records land in the log, builds use them, a job killed
(SIGKILL, SIGTERM, Ctrl-C) leaves no process behind and resumes without measuring a finished
setting again."""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
import time

import numpy as np
import onnx
import psutil
import pytest
from onnx import TensorProto, helper, numpy_helper

import tvm_fuse
from tests.conftest import assert_close, ort_outputs
from tests.tuner import worker_jobs
from tvm_fuse.target import host_features
from tvm_fuse.tuner.tune import tune
from tvm_fuse.tuning.records import read


def _conv_model():
    """conv 3x3 (16 -> 16 channels, 8x8, dilated, so that it runs direct rather than as
    Winograd) + relu: one kernel of 8 knob settings."""
    weight = numpy_helper.from_array(np.random.default_rng(0).standard_normal((16, 16, 3, 3)).astype(np.float32) / 12, "w")
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[2, 2, 2, 2], dilations=[2, 2]),
         helper.make_node("Relu", ["c"], ["y"], name="relu")], "tiny",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, 8, 8])], [weight])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9  # what ONNX Runtime reads
    return model


def _knobs(path):
    return [str(sorted(r.knobs.items())) for r in read([path])]


def test_a_tiny_job_logs_its_trials_and_builds_use_the_best(tmp_path):
    model = _conv_model()
    before = psutil.Process().children(recursive=True)
    (result,) = tune(model, trials=3, log_dir=tmp_path, repeat=3, progress=None)
    # Its worker ended with it; only the stdlib's resource tracker (which ends with this
    # process) may be new.
    left = [p for p in psutil.Process().children(recursive=True)
            if p not in before and "resource_tracker" not in " ".join(p.cmdline())]
    assert left == []
    (log,) = tmp_path.glob("*.jsonl")
    assert len(_knobs(log)) == 3 and result.trials == 3
    assert result.default_ms is not None and result.best_ms <= result.default_ms
    built = tvm_fuse.build(model, tuning_logs=log)
    assert built.fusion_report()["tuned_kernels"] == 1
    assert tvm_fuse.build(model, tuning_logs=[]).fusion_report()["default_kernels"] == 1
    x = np.random.default_rng(1).standard_normal((1, 16, 8, 8)).astype(np.float32)
    assert_close(built.run(None, {"x": x}), ort_outputs(model, {"x": x}))
    # A second job measures only settings not in the log yet, and plots its progress.
    tune(model, trials=3, log_dir=tmp_path, repeat=3, progress=None, plot=tmp_path / "progress.png")
    knobs = _knobs(log)
    assert len(knobs) == 6 and len(set(knobs)) == 6
    assert (tmp_path / "progress.png").read_bytes().startswith(b"\x89PNG")


@pytest.mark.bf16
def test_a_bf16_job_tunes_the_bf16_kernels_that_bf16_builds_use(tmp_path):
    model = _conv_model()
    (result,) = tune(model, trials=2, log_dir=tmp_path, repeat=3, precision="bf16", progress=None)
    # on tiles where this host runs AMX, else on vdpbf16ps
    rule = "tvm_fuse.conv_nchwc_amx(" if "amx_bf16" in host_features() else "tvm_fuse.conv_nchwc_bf16("
    assert result.workload.startswith(rule)
    (log,) = tmp_path.glob("*.jsonl")
    built = tvm_fuse.build(model, tuning_logs=log, precision="bf16")
    assert built.fusion_report()["tuned_kernels"] == 1
    x = np.random.default_rng(1).standard_normal((1, 16, 8, 8)).astype(np.float32)
    assert_close(built.run(None, {"x": x}), ort_outputs(model, {"x": x}), rtol=2e-2)


def _ended(processes: list[psutil.Process], timeout: float = 10) -> list[psutil.Process]:
    """Those of `processes` still alive after `timeout` seconds."""
    _, alive = psutil.wait_procs(processes, timeout=timeout)
    return alive


def _job_killed_after_two_records(tmp_path, how: signal.Signals):
    """A tuning job in its own process, sent `how` once two records are in its log: the log,
    and every process the job had started (its measuring worker among them). Each trial times
    100,000 runs (about a second), so the job is still running when the signal comes."""
    model_path = tmp_path / "tiny.onnx"
    onnx.save(_conv_model(), model_path)
    # SIGINT as a terminal's Ctrl-C finds it: a process started in the background (CI under
    # nohup, `cmd &`) inherits SIGINT ignored, and Python then installs no KeyboardInterrupt.
    script = ("import signal; signal.signal(signal.SIGINT, signal.default_int_handler); "
              "from tvm_fuse.tuner.tune import tune; "
              f"tune({str(model_path)!r}, trials=8, log_dir={str(tmp_path)!r}, repeat=100_000, progress=None)")
    job = subprocess.Popen([sys.executable, "-c", script], start_new_session=True)
    log, started, commands = tmp_path / "pending", {}, set()
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        for process in psutil.Process(job.pid).children(recursive=True):
            with contextlib.suppress(psutil.Error):
                commands.add(" ".join(process.cmdline()))
                started[process.pid] = process
        logs = list(tmp_path.glob("*.jsonl"))
        if logs and len(logs[0].read_text().splitlines()) >= 2:
            log = logs[0]
            break
        time.sleep(0.2)
    job.send_signal(how)
    job.wait(60)
    return log, list(started.values()), commands


@pytest.mark.parametrize("how", [signal.SIGKILL, signal.SIGTERM, signal.SIGINT])
def test_a_killed_job_loses_no_record_and_leaves_no_process(tmp_path, how):
    log, started, commands = _job_killed_after_two_records(tmp_path, how)
    assert any("multiprocessing" in command for command in commands), "no worker seen"
    assert _ended(started) == []
    finished = _knobs(log)
    assert 2 <= len(finished) < 8
    if how == signal.SIGKILL:  # a job started again resumes where the killed one stopped: nothing measured twice
        (result,) = tune(str(log.parent / "tiny.onnx"), trials=8, log_dir=tmp_path, repeat=3, progress=None)
        knobs = _knobs(log)
        assert result.trials > 0 and knobs[:len(finished)] == finished
        assert len(set(knobs)) == len(knobs) == len(finished) + result.trials


def test_a_crashing_candidate_is_logged_as_failed_and_the_job_goes_on(tmp_path, monkeypatch):
    monkeypatch.setattr("tvm_fuse.tuner.tune.time_candidate", worker_jobs.time_or_crash)
    (result,) = tune(_conv_model(), trials=8, log_dir=tmp_path, repeat=3, progress=None)
    records = read(list(tmp_path.glob("*.jsonl")))
    failed = [r for r in records if r.latency_ms is None]
    assert len(records) == 8 and {r.knobs["width_tile"] for r in failed} == {1}
    assert all(r.error == "the worker died (exit code 11)" for r in failed)
    assert result.failed == len(failed) >= 1 and result.best_knobs["width_tile"] == 8
