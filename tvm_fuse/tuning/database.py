"""The best knobs per workload, for a target: from its own CPU class and mcpu if measured
there, else the same class on another CPU, else the nearest class below it that shares its
vector width (an avx512-vnni machine runs avx512 fp32 knobs as they are); else none, and the
kernel keeps its heuristic default.

`build` finds logs on its own: the paths it is given, else those in `TVM_FUSE_TUNING_LOGS`
(files or folders, separated by `os.pathsep`), else the logs shipped in the package
(`tvm_fuse.tuning_logs`).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Iterable
from importlib import resources
from pathlib import Path

from ..errors import TvmFuseError
from . import records as log
from .records import Record

ENV_LOGS = "TVM_FUSE_TUNING_LOGS"
# Classes in order, each with the fp32 vector width its knobs were measured at.
ISA_CLASSES = (("avx2", 8), ("avx512", 16), ("avx512-vnni", 16), ("amx", 16))


class TuningDatabase:
    def __init__(self, records: Iterable[Record]):
        self._best: dict[str, dict[tuple[str, str], Record]] = {}  # workload -> (isa, mcpu) -> fastest
        for record in records:
            if record.latency_ms is None:
                continue
            by_cpu = self._best.setdefault(record.workload, {})
            best = by_cpu.get((record.isa, record.mcpu))
            if best is None or record.latency_ms < best.latency_ms:
                by_cpu[(record.isa, record.mcpu)] = record

    @classmethod
    def load(cls, paths: Iterable[Path | str]) -> TuningDatabase:
        """The database of the logs at `paths`, read once per process while each file keeps its
        size and modification time (parsing the shipped logs was a good part of a small
        model's build)."""
        stamps = []
        for path in map(Path, paths):
            stat = path.stat()
            stamps.append((str(path), stat.st_mtime_ns, stat.st_size))
        return _read(tuple(stamps))

    def __len__(self) -> int:
        return sum(map(len, self._best.values()))

    def lookup(self, workload: str, isa: str, mcpu: str) -> Record | None:
        """The best record for `workload` usable on (`isa`, `mcpu`), nearest first."""
        by_cpu = self._best.get(workload, {})
        for candidate_isa in _compatible(isa):
            if (candidate_isa, mcpu) in by_cpu:
                return by_cpu[(candidate_isa, mcpu)]
            found = [r for (i, _), r in by_cpu.items() if i == candidate_isa]
            if found:
                return min(found, key=lambda r: r.latency_ms)
        return None


@functools.lru_cache(maxsize=8)
def _read(stamps: tuple[tuple[str, int, int], ...]) -> TuningDatabase:
    return TuningDatabase(log.read(path for path, _, _ in stamps))


def _compatible(isa: str) -> list[str]:
    """`isa`, then the classes below it with the same vector width, nearest first."""
    widths = dict(ISA_CLASSES)
    names = [name for name, _ in ISA_CLASSES]
    if isa not in widths:
        return [isa]
    below = names[:names.index(isa)]
    return [isa] + [name for name in reversed(below) if widths[name] == widths[isa]]


def log_paths(explicit: Iterable[Path | str] | Path | str | None = None) -> list[Path]:
    """The log files `build` reads: `explicit`, else `TVM_FUSE_TUNING_LOGS`, else the shipped ones."""
    if explicit is not None:
        sources = [explicit] if isinstance(explicit, (str, Path)) else list(explicit)
    elif os.environ.get(ENV_LOGS):
        sources = [p for p in os.environ[ENV_LOGS].split(os.pathsep) if p]
    else:
        sources = [Path(str(resources.files("tvm_fuse.tuning_logs")))]
    files = []
    for source in map(Path, sources):
        if not source.exists():
            raise TvmFuseError(f"tuning log {source} does not exist")
        files += sorted(source.glob("*.jsonl")) if source.is_dir() else [source]
    return files
