"""The kernels' threads: how many (`set_num_threads`), on which cores for a stream's thread
(`pin_this_thread`), what they do between kernels (`set_spinning`), and runs in a forked
process (`in_a_fresh_thread`).

TVM keeps one pool of threads per thread that runs kernels, started at its first parallel
kernel; what idle threads do is fixed for the whole process when its first pool starts."""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor

import tvm

from .errors import TvmFuseError

SPIN_COUNT_ENV = "TVM_THREAD_POOL_SPIN_COUNT"  # read by TVM once, as its first pool starts
_BIG_CORES = 1  # TVM's default affinity mode
_GIVEN_CORES = -2  # TVM's affinity mode for a list of cores, a thread on each

_pool_started = False
_thread_count: int | None = None  # set_num_threads's count; None: TVM's default, every core
_this_thread = threading.local()  # .thread_count: the count this thread's pool was given; .pinned
_forked_from: int | None = None  # in a forked child, the thread that forked


def set_num_threads(count: int) -> None:
    """Use `count` threads in every kernel of this process, from whichever thread it runs."""
    global _thread_count
    if count < 1:
        raise ValueError(f"the thread count must be >= 1, got {count}")
    mark_pool_started()
    _thread_count = count
    configure_this_thread()


def configure_this_thread() -> None:
    """Give this thread's pool the count of `set_num_threads`, if it has not got it (not the
    pool of the thread that forked this process, whose workers are the parent's, nor that of a
    stream's thread, pinned to its cores)."""
    if _thread_count is None or threading.get_ident() == _forked_from or getattr(_this_thread, "pinned", False):
        return
    if getattr(_this_thread, "thread_count", None) != _thread_count:
        tvm.get_global_func("runtime.config_threadpool")(_BIG_CORES, _thread_count)
        _this_thread.thread_count = _thread_count


def pin_this_thread(cpus: list[int]) -> None:
    """Run this thread's kernels on `cpus` alone, a thread on each (this thread on them too),
    whatever `set_num_threads` says: a stream's cores (`streams.Streams`)."""
    mark_pool_started()
    tvm.get_global_func("runtime.config_threadpool")(_GIVEN_CORES, len(cpus), [str(cpu) for cpu in cpus])
    _this_thread.pinned = True


# A forked child has only the thread that forked, and that thread's pool (if it had started one)
# still counts on workers that stayed in the parent: a parallel kernel would wait for them
# forever. TVM cannot restart that pool, so the child runs from that thread on a thread of its
# own, whose pool starts fresh.
_after_fork: ThreadPoolExecutor | None = None
_after_fork_lock = threading.Lock()


def _note_fork() -> None:
    global _forked_from, _after_fork, _after_fork_lock
    _forked_from, _after_fork, _after_fork_lock = threading.get_ident(), None, threading.Lock()


os.register_at_fork(after_in_child=_note_fork)


def on_the_forking_thread() -> bool:
    """Whether this thread forked this process (then its kernels must run `in_a_fresh_thread`)."""
    return _forked_from is not None and threading.get_ident() == _forked_from


def in_a_fresh_thread(work):
    """`work()` on a thread started after the fork (its result returned, its exception raised)."""
    global _after_fork
    with _after_fork_lock:
        if _after_fork is None:
            _after_fork = ThreadPoolExecutor(1, thread_name_prefix="tvm_fuse-after-fork")
    return _after_fork.submit(work).result()


def set_spinning(enabled: bool) -> None:
    """Whether a kernel thread that finishes its share waits for the next kernel by spinning
    (TVM's default, as ONNX Runtime's `session.intra_op.allow_spinning`: the fastest on cores
    of our own) or goes to sleep at once. Spinning yields the core on every turn, so on a core
    that another busy process shares, each kernel waits for that process's time slice, five
    times a run's time on idle cores (`bench/contention.py`). Sleeping costs a wake-up per
    kernel on idle cores (a small model's run, up to a tenth). Call it before any model runs
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
