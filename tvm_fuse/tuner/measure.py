"""Candidates built and timed in a worker process, so that one that crashes or hangs costs a
failed record and a fresh worker, never the job; timed here, or on a machine of a TVM RPC
tracker (the kernel is built here and uploaded)."""

from __future__ import annotations

import ctypes
import multiprocessing
import os
import signal
import sys
import tempfile
from collections.abc import Callable

import numpy as np
import tvm
from tvm import rpc

from ..ir_names import KNOBS_ATTR

_PR_SET_PDEATHSIG = 1


def _die_with(parent: int) -> None:
    """Have Linux kill this process when `parent` ends, however it ends (SIGTERM, SIGKILL, a
    crash): a job's candidate must not run on without it."""
    if sys.platform == "linux":
        ctypes.CDLL(None).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:  # it ended before the request took effect
        os._exit(0)


def _serve(connection, parent: int) -> None:
    _die_with(parent)
    while True:
        try:
            function, args = connection.recv()
        except EOFError:
            return
        try:
            connection.send(("ok", function(*args)))
        except Exception as error:  # noqa: BLE001 -- any failure of a candidate is its result
            connection.send(("error", f"{type(error).__name__}: {error}"))


class Worker:
    """One worker process at a time (candidates are timed alone, never side by side)."""

    def __init__(self):
        self._context = multiprocessing.get_context("spawn")
        self._start()

    def _start(self) -> None:
        self._connection, child = self._context.Pipe()
        self._process = self._context.Process(target=_serve, args=(child, os.getpid()), daemon=True)
        self._process.start()
        child.close()

    def run(self, function: Callable, args: tuple, timeout: float):
        """(result, None), or (None, why it failed) when it raised, crashed or hung."""
        self._connection.send((function, args))
        if not self._connection.poll(timeout):
            self._restart()
            return None, f"timed out after {timeout:g} s"
        try:
            status, value = self._connection.recv()
        except (EOFError, ConnectionError):
            self._process.join(5)
            code = self._process.exitcode
            self._restart()
            return None, f"the worker died (exit code {code})"
        return (value, None) if status == "ok" else (None, value)

    def _restart(self) -> None:
        self._process.kill()
        self._process.join()
        self._start()

    def close(self) -> None:
        self._connection.close()
        self._process.kill()
        self._process.join()


def time_candidate(func_json: str, target: str, lanes: int, knobs: dict, repeat: int,
                   rpc: tuple[str, int, str] | None = None) -> float:
    """Median milliseconds of the kernel `func_json` (`tvm.ir.save_json`) scheduled with
    `knobs`, its weights and outputs flushed from the caches before each run, as in a model;
    on a machine of TVM's RPC tracker `rpc` = (host, port, key) when given, else here."""
    from ..amx import amx_permitted, uses_tiles
    from ..pipeline import TIR_PIPELINE
    from ..schedules import apply
    from ..target import parse_target
    from ..tuning.workload import static_dim

    func = tvm.ir.load_json(func_json)
    scheduled = apply(func, lanes, knobs)
    if scheduled.attrs is None or scheduled.attrs.get(KNOBS_ATTR) != "tuned":
        raise ValueError(f"knobs {knobs} do not apply to this kernel")
    mod = tvm.IRModule({"main": scheduled.with_attr("global_symbol", "main")})
    if rpc is None and uses_tiles(mod) and not amx_permitted():  # asks, as a model's run does
        raise RuntimeError("the kernel runs AMX tile programs, which the OS does not permit this process")
    kernel = tvm.compile(mod, target=parse_target(target), tir_pipeline=TIR_PIPELINE)
    module, device = _remote(kernel, *rpc) if rpc is not None else (kernel.mod, tvm.cpu())
    rng = np.random.default_rng(0)
    args = [tvm.runtime.tensor(rng.standard_normal([static_dim(d) for d in p.shape]).astype(str(p.dtype)), device=device)
            for p in func.params]
    timer = module.time_evaluator("main", device, number=1, repeat=repeat, f_preproc="cache_flush_cpu_non_first_arg")
    return float(timer(*args).median * 1e3)


def _remote(kernel, host: str, port: int, key: str):
    """`kernel` uploaded to a machine the tracker at host:port gives for `key`, and its CPU."""
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "kernel.so")
        kernel.export_library(path)
        session = rpc.connect_tracker(host, port).request(key, priority=1, session_timeout=600)
        session.upload(path)
    return session.load_module("kernel.so"), session.cpu()
