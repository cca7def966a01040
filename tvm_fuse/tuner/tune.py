"""`tune`: measure knob settings of a model's kernels and append each result to a log that
`build` reads.

Every task first measures its default knobs; further trials go, one at a time, to the task
where a run spends the most time (calls x best latency so far), shared out as tasks get
tried (divided by 1 + trials so far). Within a task, the XGBoost cost model
(`cost_model.py`) picks the untried setting predicted fastest once its rule has enough
measurements; one trial in `EXPLORE` takes a random one instead, so the model keeps learning.
A job resumes where a killed one stopped: settings already in the log for this CPU are not
measured again, and they train the model.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import tvm

from ..calibrate import int8_pass
from ..errors import TvmFuseError
from ..frontend import relax_module
from ..patterns.switches import disabled_families
from ..quantization.config import QuantConfig
from ..schedules import knob_space
from ..target import isa_class, parse_target, target_cpu, target_string, vector_lanes
from ..transform.realize.bf16 import bf16_pass
from ..tuning import records as log
from ..tuning.records import Record
from .cost_model import CostModel
from .measure import Worker, time_candidate
from .tasks import extract_tasks

EXPLORE = 4  # every 4th trial of a task takes a random untried setting


@dataclass
class TaskResult:
    workload: str
    calls: int
    gflop: float  # per call
    default_knobs: dict
    untried: list  # settings in the order to try them
    default_ms: float | None = None
    best_ms: float | None = None
    best_knobs: dict | None = None
    trials: int = 0  # measured by this job
    failed: int = 0

    @property
    def weight(self) -> float:
        return self.calls * (self.best_ms or 0.0) / (1 + self.trials)


def log_path(log_dir: Path | str, target: tvm.target.Target) -> Path:
    """One log per CPU: `<log_dir>/<isa class>-<mcpu>.jsonl`."""
    return Path(log_dir) / f"{isa_class(target)}-{target_cpu(target)}.jsonl"


def tune(model, target=None, *, trials: int = 100, log_dir: Path | str = "tuning_logs", timeout: float = 60.0,
         repeat: int = 10, input_shapes: Mapping[str, Sequence[int]] | None = None,
         disable_fusion: Iterable[str] | str | None = None, seed: int = 0,
         rpc_tracker: str | None = None, rpc_key: str | None = None, plot: Path | str | None = None,
         quantize: QuantConfig | None = None, precision: str = "fp32",
         progress: Callable[[str], None] | None = print) -> list[TaskResult]:
    """Measure up to `trials` new knob settings of `model`'s kernels for `target`, each in a
    worker process that gets `timeout` seconds, and append every result to the log in
    `log_dir`. With `rpc_tracker` ("host:port") and `rpc_key`, kernels run on the machines
    that TVM's RPC tracker serves for that key (`target` should describe them). `plot`: a
    PNG of each task's best latency so far against the job's trials. Returns per task its
    default and best latency (ms, cold caches)."""
    remote = _rpc(rpc_tracker, rpc_key)
    if plot is not None:
        try:
            import matplotlib  # noqa: F401 -- checked now rather than after the job
        except ImportError as error:
            raise TvmFuseError("plotting needs matplotlib: pip install 'tvm_fuse[bench]'") from error
    tvm_target = parse_target(target)
    imported = relax_module(model, input_shapes)
    int8 = int8_pass(model, imported, quantize, tvm_target, input_shapes)
    tasks = extract_tasks(imported.mod, tvm_target, disabled_families(disable_fusion), int8,
                          bf16_pass(precision, tvm_target))
    path = log_path(log_dir, tvm_target)
    path.parent.mkdir(parents=True, exist_ok=True)
    isa, cpu, lanes = isa_class(tvm_target), target_cpu(tvm_target), vector_lanes(tvm_target)
    finished = {(r.workload, _key(r.knobs)): r for r in (log.read([path]) if path.exists() else [])
                if r.isa == isa and r.mcpu == cpu}
    rng = random.Random(seed)
    model = CostModel(seed)
    results = {}
    for task in tasks:
        space = knob_space(task.func, lanes)
        result = TaskResult(task.workload, task.calls, task.flops / 1e9, space[0],
                            [space[0]] + rng.sample(space[1:], len(space) - 1))
        for knobs in space:  # what earlier jobs measured
            done = finished.get((task.workload, _key(knobs)))
            if done is not None:
                result.untried.remove(knobs)
                _update(result, knobs, done.latency_ms)
                if done.latency_ms is not None:
                    model.add(task.rule, task.extents, knobs, done.latency_ms)
        results[task.workload] = result
    by_workload = {task.workload: task for task in tasks}
    worker = Worker()
    start, measured = time.monotonic(), 0
    history: dict[str, list[tuple[int, float]]] = {}  # workload -> (trial, best ms so far)
    try:
        while measured < trials:
            # Defaults first, then the task with the most run time to win.
            pending = [r for r in results.values() if r.untried]
            if not pending:
                break
            defaults = [r for r in pending if r.default_knobs in r.untried]
            result = defaults[0] if defaults else max(pending, key=lambda r: r.weight)
            task = by_workload[result.workload]
            explore = result.trials % EXPLORE == EXPLORE - 1
            predicted = None if defaults or explore else model.best(task.rule, task.extents, result.untried)
            knobs = predicted or result.untried[0]
            result.untried.remove(knobs)
            latency, error = worker.run(time_candidate, (task.func_json, target_string(tvm_target),
                                                         lanes, knobs, repeat, remote), timeout)
            log.append(path, Record(result.workload, isa, cpu, knobs, latency, error))
            measured += 1
            result.trials += 1
            if latency is None:
                result.failed += 1
            else:
                model.add(task.rule, task.extents, knobs, latency)
            _update(result, knobs, latency)
            if result.best_ms is not None:
                history.setdefault(result.workload, []).append((measured, result.best_ms))
            if progress:
                progress(_progress_line(measured, trials, start, result, knobs, latency, error))
    finally:
        worker.close()
    summary = list(results.values())
    if progress:
        progress(summary_table(summary, path))
    if plot is not None:
        plot_history(history, trials, plot)
    return summary


def plot_history(history: dict[str, list[tuple[int, float]]], trials: int, path: Path | str) -> None:
    """Best latency so far (relative to the task's first) against trials, one line per task."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5))
    for workload, points in history.items():
        xs, ys = zip(*points)
        ax.step(xs, [y / ys[0] for y in ys], where="post", label=workload[:50])
    ax.set_xlim(0, max(trials, 1))
    ax.set_xlabel("trials of this job")
    ax.set_ylabel("best latency so far / first measured")
    ax.set_title("tvm_fuse tuning")
    if len(history) <= 12:
        ax.legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _rpc(tracker: str | None, key: str | None) -> tuple[str, int, str] | None:
    """(host, port, key) of an RPC tracker, or None to measure here."""
    if tracker is None and key is None:
        return None
    host, _, port = (tracker or "").rpartition(":")
    if not host or not port.isdigit() or not key:
        raise TvmFuseError(f"RPC measurement needs --rpc-tracker HOST:PORT and --rpc-key KEY "
                           f"(got tracker {tracker!r}, key {key!r})")
    return host, int(port), key


def _key(knobs: dict) -> str:
    return json.dumps(knobs, sort_keys=True)


def _update(result: TaskResult, knobs: dict, latency: float | None) -> None:
    if latency is None:
        return
    if knobs == result.default_knobs:
        result.default_ms = latency
    if result.best_ms is None or latency < result.best_ms:
        result.best_ms, result.best_knobs = latency, knobs


def _progress_line(done: int, total: int, start: float, result: TaskResult, knobs: dict,
                   latency: float | None, error: str | None) -> str:
    elapsed = time.monotonic() - start
    eta = elapsed / done * (total - done)
    bar = "#" * (20 * done // total) + "." * (20 - 20 * done // total)
    outcome = f"{latency:.3f} ms" if latency is not None else f"failed: {error}"
    best = f"best {result.gflop / result.best_ms * 1e3:.0f} GFLOP/s" if result.best_ms else "no result yet"
    return (f"[{bar}] {done}/{total} ETA {eta:.0f} s | {result.workload[:60]} {knobs}: {outcome}; {best}")


def summary_table(results: list[TaskResult], path: Path) -> str:
    lines = [f"tuning log: {path}",
             f"{'calls':>5} {'default ms':>10} {'best ms':>8} {'speedup':>7} {'GFLOP/s':>8} {'trials':>6}  workload"]
    for r in results:
        speedup = f"{r.default_ms / r.best_ms:.2f}x" if r.default_ms and r.best_ms else "-"
        rate = f"{r.gflop / r.best_ms * 1e3:.0f}" if r.best_ms else "-"
        lines.append(f"{r.calls:5d} {_ms(r.default_ms):>10} {_ms(r.best_ms):>8} {speedup:>7} {rate:>8} "
                     f"{r.trials:6d}  {r.workload}")
    return "\n".join(lines)


def _ms(value: float | None) -> str:
    return f"{value:.3f}" if value is not None else "-"
