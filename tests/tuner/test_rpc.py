"""Tuning measures through TVM's RPC tracker: a tracker and two servers on 127.0.0.1."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time

import psutil
import pytest
from tvm import rpc

from tests.tuner.test_tune import _conv_model
from tvm_fuse.errors import TvmFuseError
from tvm_fuse.tuner.tune import tune
from tvm_fuse.tuning.records import read


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _start(command: list[str], **kwargs) -> subprocess.Popen:
    """A TVM RPC process in a process group of its own: it starts `popen_worker` children,
    which a kill of the process alone would leave running, reparented to init."""
    return subprocess.Popen([sys.executable, "-m", *command], start_new_session=True, **kwargs)


@pytest.fixture
def tracker(tmp_path):
    port = _free_port()
    started = [_start(["tvm.exec.rpc_tracker", "--host", "127.0.0.1", "--port", str(port), "--port-end", str(port + 1)])]
    logs = []
    try:
        time.sleep(2)
        for index in range(2):
            log = open(tmp_path / f"server{index}.log", "w")
            logs.append(log)
            server_port = _free_port()
            started.append(_start(
                ["tvm.exec.rpc_server", "--tracker", f"127.0.0.1:{port}", "--key", "tvm_fuse_test",
                 "--host", "127.0.0.1", "--port", str(server_port), "--port-end", str(server_port + 1)],
                stdout=log, stderr=subprocess.STDOUT))
        deadline = time.monotonic() + 60
        while not re.search(r"tvm_fuse_test\s+2\s", rpc.connect_tracker("127.0.0.1", port).text_summary()):
            assert time.monotonic() < deadline, "the RPC servers did not register"
            time.sleep(0.5)
        yield port, [tmp_path / f"server{i}.log" for i in range(2)]
    finally:
        children = [c for p in started for c in psutil.Process(p.pid).children(recursive=True)]
        for process in started:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        for log in logs:
            log.close()
        _, alive = psutil.wait_procs(children, timeout=10)
        assert alive == [], f"RPC processes left running: {alive}"


def test_candidates_run_on_the_tracker_servers(tracker, tmp_path):
    port, server_logs = tracker
    (result,) = tune(_conv_model(), trials=3, log_dir=tmp_path, repeat=3, rpc_tracker=f"127.0.0.1:{port}",
                     rpc_key="tvm_fuse_test", progress=None)
    (log,) = tmp_path.glob("*.jsonl")
    assert [r.error for r in read([log])] == [None] * 3 and result.best_ms > 0
    served = sum(path.read_text().count("load_module") for path in server_logs)
    assert served == 3


def test_rpc_needs_both_a_tracker_address_and_a_key(tmp_path):
    with pytest.raises(TvmFuseError, match="--rpc-tracker HOST:PORT and --rpc-key KEY"):
        tune(_conv_model(), trials=1, log_dir=tmp_path, rpc_tracker="127.0.0.1", progress=None)
