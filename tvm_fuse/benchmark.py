"""Latency statistics of repeated runs: warm-up first, then median and percentiles."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

import numpy as np


@dataclass(frozen=True)
class Latency:
    """Milliseconds per run over `runs` timed runs."""

    runs: int
    median_ms: float
    mean_ms: float
    min_ms: float
    p90_ms: float
    p99_ms: float

    @classmethod
    def of(cls, times_ms: list[float]) -> "Latency":
        t = np.asarray(times_ms)
        return cls(
            runs=len(t),
            median_ms=float(np.median(t)),
            mean_ms=float(t.mean()),
            min_ms=float(t.min()),
            p90_ms=float(np.percentile(t, 90)),
            p99_ms=float(np.percentile(t, 99)),
        )

    def __str__(self) -> str:
        return (
            f"median {self.median_ms:.2f} ms, p90 {self.p90_ms:.2f} ms, "
            f"min {self.min_ms:.2f} ms over {self.runs} runs"
        )


def time_runs(run: Callable[[], object], warmup: int = 3, repeat: int = 20) -> list[float]:
    """Milliseconds of each of `repeat` calls of `run`, after `warmup` untimed calls."""
    if repeat < 1 or warmup < 0:
        raise ValueError(f"need repeat >= 1 and warmup >= 0, got repeat={repeat}, warmup={warmup}")
    for _ in range(warmup):
        run()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        run()
        times.append((time.perf_counter() - start) * 1e3)
    return times


def random_feed(inputs, rng: np.random.Generator | None = None, dims: dict | None = None) -> dict:
    """Random inputs for `inputs` (TensorInfo list); symbolic dims take `dims` values, else 1."""
    rng = rng or np.random.default_rng(0)
    dims = dims or {}
    feed = {}
    for info in inputs:
        shape = tuple(d if isinstance(d, int) else int(dims.get(d, 1)) for d in info.shape)
        dtype = np.dtype(info.dtype)
        if dtype.kind == "f":
            feed[info.name] = rng.standard_normal(shape).astype(dtype)
        elif dtype.kind == "b":
            feed[info.name] = np.ones(shape, dtype)
        else:  # integer inputs are usually ids or masks: keep them small and valid
            feed[info.name] = rng.integers(0, 2, shape).astype(dtype)
    return feed
