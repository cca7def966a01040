"""The kernels' threads: how many (`set_num_threads`), and what they do between kernels
(`set_spinning`). TVM keeps one pool of threads per calling thread; what idle threads do is
fixed for the whole process when its first pool starts, at the first run of a model."""

from __future__ import annotations

import os

import tvm

from .errors import TvmFuseError

SPIN_COUNT_ENV = "TVM_THREAD_POOL_SPIN_COUNT"  # read by TVM once, as its first pool starts

_pool_started = False


def set_num_threads(count: int) -> None:
    """Use `count` threads in every kernel of this process (TVM's pool is per process)."""
    if count < 1:
        raise ValueError(f"the thread count must be >= 1, got {count}")
    mark_pool_started()
    # Affinity mode 1 ("big cores") is the default, with `count` workers.
    tvm.get_global_func("runtime.config_threadpool")(1, count)


def set_spinning(enabled: bool) -> None:
    """Whether a kernel thread that finishes its share waits for the next kernel by spinning
    (TVM's default, as ONNX Runtime's `session.intra_op.allow_spinning`: the fastest on cores
    of our own) or goes to sleep at once. Spinning yields the core on every turn, so on a core
    that another busy process shares, each kernel waits for that process's time slice: on 2
    cores with one of them busy, MiniLM took 168 ms a run spinning and 31 ms sleeping (16-18
    ms on idle cores; `bench/contention.py`). Sleeping costs a wake-up per kernel on idle
    cores (SqueezeNet, about 3 ms, took up to a tenth longer). Call it before any model runs
    in this process (or set `TVM_THREAD_POOL_SPIN_COUNT=0` in the environment)."""
    if _pool_started:
        raise TvmFuseError("set_spinning must be called before any model runs or set_num_threads is called "
                           "in this process: TVM fixes what idle threads do when its first thread pool starts")
    if enabled:
        os.environ.pop(SPIN_COUNT_ENV, None)
    else:
        os.environ[SPIN_COUNT_ENV] = "0"


def mark_pool_started() -> None:
    """Note that TVM's thread pool may have started (a model about to run): `set_spinning`
    can no longer take effect."""
    global _pool_started
    _pool_started = True
