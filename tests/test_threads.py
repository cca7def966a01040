"""The kernels' threads (`tvm_fuse.threads`): their count reaches TVM's pool, and without
spinning they sleep between runs, which is what keeps a core shared with a busy process from
stalling every kernel. The spinning checks run in a fresh interpreter: TVM fixes what idle
threads do when the process's first pool starts."""

from __future__ import annotations

import json
import multiprocessing
import os
import pickle
import select
import signal
import subprocess
import sys
import textwrap
import threading
import time
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


def test_the_thread_count_reaches_every_thread_that_runs_a_model():
    import tvm

    model = tvm_fuse.build(dense_model((4,), 8, 8), "llvm")
    seen = []

    def run_and_read_the_pool():
        model.run(None, {"x": np.ones((4, 8), np.float32)})
        seen.append(tvm.get_global_func("runtime.NumThreads")())

    tvm_fuse.set_num_threads(1)
    worker = threading.Thread(target=run_and_read_the_pool)
    worker.start()
    worker.join()
    tvm_fuse.set_num_threads(host_cores())  # as the other tests expect it
    assert seen == [1]


# -- a model in a forked process ----------------------------------------------------------
# A model run before a fork runs in the child too: each precision, built here or loaded from
# its export, in a child made by os.fork (what gunicorn's and uWSGI's pre-fork workers do) and
# by multiprocessing's three start methods.
FORK_FEED = {"x": np.random.default_rng(1).standard_normal((256, 256)).astype(np.float32)}


def _precisions() -> list:
    features = tvm_fuse.host_features()
    return [pytest.param("fp32"),
            pytest.param("bf16", marks=pytest.mark.skipif("avx512_bf16" not in features,
                                                          reason="bf16 builds need AVX512-BF16")),
            pytest.param("int8", marks=pytest.mark.skipif(not features & {"avx2", "avx512bw"},
                                                          reason="int8 kernels need AVX2 or AVX512-BW"))]


def _model(precision: str):
    # Large enough that its kernel runs on the pool's workers, not the calling thread alone.
    model = dense_model((256,), 256, 512)
    if precision == "int8":
        return tvm_fuse.build(model, quantize=tvm_fuse.QuantConfig(calibration=[FORK_FEED]))
    return tvm_fuse.build(model, precision=precision)


@pytest.fixture(scope="module", params=_precisions())
def exported(request, tmp_path_factory):
    model = _model(request.param)
    return model, model.export(tmp_path_factory.mktemp(request.param) / "model.so")


def _in_a_forked_child(model, seconds: float = 60) -> tuple[np.ndarray, float]:
    """`model`'s output on FORK_FEED in a child of os.fork, and the seconds its run took there;
    the child is killed if it has not answered within `seconds`."""
    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # the child: answer through the pipe, then leave without pytest's cleanup
        try:
            start = time.perf_counter()
            output = model.run(None, FORK_FEED)[0]
            os.write(write, pickle.dumps((output, time.perf_counter() - start)))
        finally:
            os._exit(0)
    os.close(write)
    data, deadline = b"", time.monotonic() + seconds
    with os.fdopen(read, "rb", buffering=0) as answer:  # read as it comes: it is larger than a pipe holds
        while True:
            if not select.select([answer], [], [], max(0.0, deadline - time.monotonic()))[0]:
                os.kill(child, signal.SIGKILL)
                os.waitpid(child, 0)
                pytest.fail(f"the forked child did not answer within {seconds} s")
            chunk = answer.read(1 << 20)
            if not chunk:
                break
            data += chunk
    os.waitpid(child, 0)
    assert data, "the forked child died without an answer"
    return pickle.loads(data)


@pytest.mark.parametrize("source", ["built", "loaded"])
def test_a_model_run_before_a_fork_runs_in_the_child(exported, source):
    built, library = exported
    model = built if source == "built" else tvm_fuse.load(library)
    expected = model.run(None, FORK_FEED)[0]  # the parent's pool is started
    output, seconds = _in_a_forked_child(model)
    np.testing.assert_array_equal(output, expected)
    assert seconds < 1.0, f"the child's first run took {seconds:.2f} s"
    np.testing.assert_array_equal(model.run(None, FORK_FEED)[0], expected)  # and the parent still runs


def _run_loaded(library: str) -> np.ndarray:
    return tvm_fuse.load(library).run(None, FORK_FEED)[0]


@pytest.mark.parametrize("method", ["fork", "forkserver", "spawn"])
def test_multiprocessing_workers_run_a_model(exported, method):
    if method != "fork" and exported[0].precision != "fp32":
        pytest.skip("a fresh interpreter per precision adds nothing the fp32 case does not check")
    model, library = exported
    expected = model.run(None, FORK_FEED)[0]
    with multiprocessing.get_context(method).Pool(2) as pool:
        outputs = pool.map(_run_loaded, [str(library)] * 2, chunksize=1)
    for output in outputs:
        np.testing.assert_array_equal(output, expected)
