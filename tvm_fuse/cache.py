"""The build cache: a build kept as an exported library under a key of everything that decides
its code, so that building the same model with the same options again loads it instead.

    model = tvm_fuse.build("resnet50.onnx", cache_dir="~/.cache/tvm_fuse")  # or TVM_FUSE_CACHE_DIR

The key is a SHA-256 over the model's bytes (its external data included), the target, every
build option, the tuning records the build reads, the switches in the environment that change
code, the tvm_fuse and TVM versions, and the bytes of tvm_fuse's own code (so that a changed
checkout or an upgrade that kept the version number never loads what the old code built). An
entry is a folder named by its key, holding the exported model (`artifact.export`) and
`entry.json`, which says what was built. It is written under a temporary name and renamed into
place: a reader sees a whole entry or none, and of two processes building one model at once,
the second to finish finds the entry there and drops its own. An entry that does not load
(truncated, corrupt, its hashes not matching) is removed and rebuilt with a warning, never run.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
import shutil
import time
import uuid
import warnings
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import onnx
import tvm

from . import artifact
from ._version import __version__
from .errors import ExportError, TvmFuseError
from .frontend.load import load_model

ENV_CACHE_DIR = "TVM_FUSE_CACHE_DIR"
LIBRARY = "model.so"
ENTRY = "entry.json"  # what the entry holds, for `tvm-fuse cache ls`
_CODE_SWITCHES = ("TVM_FUSE_DISABLE_WINOGRAD",)  # environment switches that change a build's code


def cache_dir(explicit: str | os.PathLike | None) -> Path | None:
    """The cache folder a build uses: `explicit`, else `TVM_FUSE_CACHE_DIR`, else none."""
    chosen = explicit if explicit is not None else os.environ.get(ENV_CACHE_DIR) or None
    return None if chosen is None else Path(chosen).expanduser()


def _feed(digest, value) -> None:
    """Add `value` to `digest`, tagged by its kind so that different values never collide:
    arrays by dtype, shape and bytes, files by their bytes, folders by their sorted files,
    mappings by their sorted items, dataclasses by their fields."""
    if isinstance(value, np.ndarray):
        digest.update(f"array:{value.dtype.str}:{value.shape}:".encode())
        digest.update(np.ascontiguousarray(value).tobytes())
    elif isinstance(value, (bytes, bytearray, memoryview)):
        digest.update(f"bytes:{len(value)}:".encode())
        digest.update(value)
    elif isinstance(value, Path):
        if value.is_dir():
            digest.update(b"folder:")
            for path in sorted(p for p in value.rglob("*") if p.is_file()):
                _feed(digest, str(path.relative_to(value)))
                _feed(digest, path)
        else:
            _feed(digest, value.read_bytes())
    elif isinstance(value, Mapping):
        digest.update(f"map:{len(value)}:".encode())
        for key in sorted(value, key=str):
            _feed(digest, str(key))
            _feed(digest, value[key])
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        digest.update(f"{type(value).__name__}:".encode())
        _feed(digest, {f.name: getattr(value, f.name) for f in dataclasses.fields(value)})
    elif isinstance(value, (list, tuple)):
        digest.update(f"seq:{len(value)}:".encode())
        for item in value:
            _feed(digest, item)
    elif value is None or isinstance(value, (str, int, float, bool, np.generic)):
        digest.update(f"{type(value).__name__}:{value!r};".encode())
    else:
        raise TvmFuseError(f"the build cache cannot key a {type(value).__name__}; build without cache_dir")


def model_bytes(model) -> tuple[bytes, object]:
    """(the bytes that key `model`, the model for the build to read): a file's own bytes where it
    keeps no external data, given bytes, a given ModelProto serialized, else the model loaded
    with its external data, serialized."""
    if isinstance(model, (str, os.PathLike)) and Path(model).is_file():
        data = Path(model).read_bytes()
        parsed = onnx.ModelProto()
        try:
            parsed.ParseFromString(data)
        except Exception:
            return data, model  # not ONNX: the build says what is wrong with it
        if not _external_data(parsed.graph):
            return data, model  # the build reads the file again, and names it in its errors
    if isinstance(model, (bytes, bytearray, memoryview)):
        return bytes(model), model
    if isinstance(model, onnx.ModelProto):  # checked by the build on a miss; a hit was checked before
        return model.SerializeToString(), model
    model = load_model(model)
    return model.SerializeToString(), model


def model_name(model) -> str:
    """How `cache ls` names a model: its path, or its graph's name."""
    if isinstance(model, onnx.ModelProto):
        return model.graph.name
    return str(model) if isinstance(model, (str, os.PathLike)) else "(given as bytes)"


def _external_data(graph: onnx.GraphProto) -> bool:
    """Whether a tensor of `graph` or of a graph inside it keeps its data in another file."""
    tensors = list(graph.initializer)
    for node in graph.node:
        for attribute in node.attribute:
            tensors += [attribute.t, *attribute.tensors]
            if any(_external_data(g) for g in [attribute.g, *attribute.graphs] if g.node):
                return True
    return any(t.data_location == onnx.TensorProto.EXTERNAL for t in tensors)


def key(model_bytes: bytes, target: str, options: Mapping, tuning_logs: list[Path]) -> str:
    """The key of a build: `model_bytes` (serialized, external data included), the full
    target string, the build `options` and the tuning log files it reads."""
    digest = hashlib.sha256()
    _feed(digest, {
        "model": model_bytes,
        "target": target,
        "options": dict(options),
        "tuning_logs": [Path(p) for p in tuning_logs],
        "switches": {name: os.environ.get(name) for name in _CODE_SWITCHES},
        "versions": [__version__, tvm.__version__],
        "code": _code_digest(),
    })
    return digest.hexdigest()


@functools.cache
def _code_digest() -> str:
    """A SHA-256 over tvm_fuse's Python sources and schedule knobs, as installed."""
    from . import schedules

    digest = hashlib.sha256()
    for root in (Path(__file__).parent, Path(schedules.__file__).parent):
        for path in sorted(root.rglob("*")):
            if path.suffix in (".py", ".json") and "benchmarking" not in path.relative_to(root).parts:
                _feed(digest, str(path.relative_to(root)))
                _feed(digest, path)
    return digest.hexdigest()


def lookup(folder: Path, entry_key: str):
    """The model cached under `entry_key` in `folder`, or None. An entry that does not load
    is removed, with a warning, so that the build that follows replaces it."""
    entry = folder / entry_key
    if not entry.is_dir():
        return None
    try:
        return artifact.load(entry / LIBRARY)
    except ExportError as error:
        warnings.warn(f"the build cache entry {entry} does not load ({error}); rebuilding it")
        _remove(entry)
        return None


def store(folder: Path, entry_key: str, model, description: Mapping) -> None:
    """Keep `model` (built in this process) under `entry_key` in `folder`. A failure to write
    is a warning: the build itself succeeded."""
    entry = folder / entry_key
    staging = folder / f".{entry_key}.{os.getpid()}.{uuid.uuid4().hex[:8]}"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        staging.mkdir()
        artifact.export(model, staging / LIBRARY)
        record = {**description, "created": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
        (staging / ENTRY).write_text(json.dumps(record, indent=2))
        try:
            os.rename(staging, entry)
        except OSError:
            if not entry.is_dir():  # not a concurrent build's entry: a real failure
                raise
    except (OSError, ExportError) as error:
        warnings.warn(f"cannot write the build cache entry {entry}: {error}")
    finally:
        _remove(staging)


def _remove(path: Path) -> None:
    """Remove the folder `path` if it exists, first renaming it so that no reader finds it half removed."""
    if not path.exists():
        return
    doomed = path.with_name(f".removing.{path.name}.{uuid.uuid4().hex[:8]}")
    try:
        os.rename(path, doomed)
    except OSError:
        return
    shutil.rmtree(doomed, ignore_errors=True)


def entries(folder: Path) -> list[dict]:
    """Each entry in `folder`: its key, size in bytes, and what `entry.json` says was built."""
    found = []
    for entry in sorted(folder.iterdir()) if folder.is_dir() else []:
        if entry.name.startswith(".") or not entry.is_dir():
            continue
        try:
            described = json.loads((entry / ENTRY).read_text())
        except (OSError, ValueError):
            described = {}
        size = sum(p.stat().st_size for p in entry.iterdir() if p.is_file())
        found.append({"key": entry.name, "bytes": size, **described})
    return found


def clear(folder: Path) -> int:
    """Remove every entry (and any leftover staging folder) in `folder`; return the entries removed."""
    removed = 0
    for entry in list(folder.iterdir()) if folder.is_dir() else []:
        if entry.is_dir():
            removed += not entry.name.startswith(".")
            _remove(entry)
    return removed
