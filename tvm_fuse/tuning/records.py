"""Tuning logs: JSON lines, one measured candidate per line, appended as each finishes.

A line is `{"version": 1, "workload": ..., "isa": ..., "mcpu": ..., "knobs": {...},
"latency_ms": ..., "error": ...}` (`latency_ms` null and `error` set for a candidate that
failed). Appends take an exclusive lock and are flushed to disk before the next starts, so a
job killed at any point loses at most the line it was writing, and jobs sharing a log lose
nothing. A line that does not parse (the torn last line of a killed job, a hand edit) is
skipped with a warning naming the file and line.
"""

from __future__ import annotations

import fcntl
import json
import os
import warnings
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path

FORMAT_VERSION = 1


@dataclass(frozen=True)
class Record:
    workload: str
    isa: str  # target.isa_class: avx2, avx512, avx512-vnni, amx
    mcpu: str
    knobs: dict = field(hash=False)
    latency_ms: float | None  # None: the candidate failed
    error: str | None = None

    def to_line(self) -> str:
        return json.dumps({"version": FORMAT_VERSION, **asdict(self)}, sort_keys=True)

    @classmethod
    def from_line(cls, line: str) -> Record:
        data = json.loads(line)
        if data.pop("version", None) != FORMAT_VERSION:
            raise ValueError(f"not a version {FORMAT_VERSION} record")
        record = cls(**data)
        if not isinstance(record.knobs, dict) or not isinstance(record.workload, str):
            raise ValueError("knobs must be an object and workload a string")
        return record


def append(path: Path | str, record: Record) -> None:
    """Add `record` to the log at `path` (created if missing), durably."""
    line = (record.to_line() + "\n").encode()
    with open(path, "ab") as log:
        fcntl.flock(log, fcntl.LOCK_EX)
        try:
            log.write(line)
            log.flush()
            os.fsync(log.fileno())
        finally:
            fcntl.flock(log, fcntl.LOCK_UN)


def read(paths: Iterable[Path | str]) -> list[Record]:
    """Every record of the logs at `paths`; corrupt lines skipped with a warning."""
    records = []
    for path in paths:
        with open(path, encoding="utf-8", errors="replace") as log:
            for number, line in enumerate(log, 1):
                if not line.strip():
                    continue
                try:
                    records.append(Record.from_line(line))
                except (ValueError, TypeError) as error:
                    warnings.warn(f"{path}:{number}: skipped a corrupt tuning record ({error})", stacklevel=2)
    return records
