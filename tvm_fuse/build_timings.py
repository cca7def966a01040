"""Where a build's time goes: seconds per phase (`fusion_report()["build_seconds"]`,
`tvm-fuse build --timings`).

`build` records inside `recording()`; each step of it runs in a `phase`. A phase's seconds leave
out the phases nested in it, which are named after it ("outer / inner"), and what
no phase covers is "other", so the phases add up to the whole build. Outside `recording()` a
phase costs nothing.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

_seconds: ContextVar[dict[str, float] | None] = ContextVar("tvm_fuse_build_seconds", default=None)
_open: ContextVar[tuple[list, ...]] = ContextVar("tvm_fuse_open_phases", default=())  # [name, nested seconds]


@contextmanager
def recording() -> Iterator[dict[str, float]]:
    """Record the phases run inside into the returned dict, in the order they first ran."""
    seconds: dict[str, float] = {}
    root = ["", 0.0]  # what no phase covers is "other"
    tokens = _seconds.set(seconds), _open.set((root,))
    start = time.perf_counter()
    try:
        yield seconds
    finally:
        seconds["other"] = time.perf_counter() - start - root[1]
        _open.reset(tokens[1])
        _seconds.reset(tokens[0])


@contextmanager
def phase(name: str) -> Iterator[None]:
    seconds = _seconds.get()
    if seconds is None:
        yield
        return
    outer = _open.get()
    frame = [f"{outer[-1][0]} / {name}" if outer[-1][0] else name, 0.0]
    token = _open.set((*outer, frame))
    start = time.perf_counter()
    try:
        yield
    finally:
        elapsed = time.perf_counter() - start
        _open.reset(token)
        seconds[frame[0]] = seconds.get(frame[0], 0.0) + elapsed - frame[1]
        outer[-1][1] += elapsed


def table(seconds: dict[str, float]) -> str:
    """The phases as lines of seconds and share of the whole, for people."""
    total = sum(seconds.values()) or 1.0
    lines = [f"{value:8.2f} s {100 * value / total:5.1f}%  {name}" for name, value in seconds.items()]
    return "\n".join([*lines, f"{sum(seconds.values()):8.2f} s         build"])
