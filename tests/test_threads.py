"""The kernels' threads (`tvm_fuse.threads`): their count reaches TVM's pool, and without
spinning they sleep between runs, which is what keeps a core shared with a busy process from
stalling every kernel. The spinning checks run in a fresh interpreter: TVM fixes what idle
threads do when the process's first pool starts."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import tvm_fuse
from tests.conftest import dense_model
from tvm_fuse import TvmFuseError
from tvm_fuse.target import host_cores

# Builds a dense layer large enough for its kernel to run in parallel (not on the calling
# thread alone, `SerialSmallKernels`), runs it, and prints each other thread's state 5 ms
# after the run (/proc: R running or runnable, S sleeping).
THREAD_STATES = textwrap.dedent("""
    import json, os, sys, time
    import numpy as np
    import tvm_fuse
    from tests.conftest import dense_model

    if sys.argv[1] == "off":
        tvm_fuse.set_spinning(False)
    model = tvm_fuse.build(dense_model((256,), 256, 512), "llvm")
    feed = {"x": np.ones((256, 256), np.float32)}

    def states():
        found = []
        for task in os.listdir("/proc/self/task"):
            if int(task) != os.getpid():  # the main thread's id is the process's
                with open(f"/proc/self/task/{task}/stat") as stat:
                    found.append(stat.read().rsplit(")", 1)[1].split()[0])
        return found

    for _ in range(20):
        model.run(None, feed)
    time.sleep(0.005)  # a sleeping worker is asleep by now; a spinning one spins for 300,000 yields
    print(json.dumps(states()))
""")


def _thread_states(spinning: str) -> list[str]:
    result = subprocess.run([sys.executable, "-c", THREAD_STATES, spinning], capture_output=True, text=True,
                            check=True, cwd=Path(__file__).parents[1])
    return json.loads(result.stdout.strip().splitlines()[-1])


needs_workers = pytest.mark.skipif(host_cores() < 2 or not sys.platform.startswith("linux"),
                                   reason="needs 2 or more cores (worker threads) and Linux's /proc")


@needs_workers
def test_without_spinning_idle_threads_sleep_right_after_a_run():
    states = _thread_states("off")
    assert states and set(states) == {"S"}, states


@needs_workers
def test_spinning_threads_keep_running_right_after_a_run():
    # TVM's default, which set_spinning(False) turns off: the check above is not vacuous.
    states = _thread_states("on")
    assert "R" in states, states


def test_set_spinning_after_a_run_is_refused():
    model = tvm_fuse.build(dense_model((4,), 8, 8), "llvm")
    model.run(None, {"x": np.ones((4, 8), np.float32)})
    with pytest.raises(TvmFuseError, match="before any model runs"):
        tvm_fuse.set_spinning(False)


def test_thread_count_reaches_the_runtime():
    import tvm

    runtime_threads = tvm.get_global_func("runtime.NumThreads")
    cores = host_cores()
    tvm_fuse.set_num_threads(1)
    assert runtime_threads() == 1
    tvm_fuse.set_num_threads(cores)
    assert runtime_threads() == cores
    with pytest.raises(ValueError, match=">= 1"):
        tvm_fuse.set_num_threads(0)
