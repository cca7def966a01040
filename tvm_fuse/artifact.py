"""Exported models on disk: a shared library, its weights and a JSON file of metadata beside them.

`model.so` holds the code, `model.weights` the weights (`weights_file`, mapped by a load),
`model.json` the signature and target plus the SHA-256 of the other two, so files from two
different exports are never paired silently. A model with kernels on AMX tiles also writes its
build without AMX, `model.noamx.so` and `model.noamx.weights`, whose hashes the metadata holds too.
All files are written under temporary names and renamed into place: an export that is
interrupted leaves the previous files, never half-written ones.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import tvm

from . import weights_file
from ._native import quiet_stderr
from ._version import __version__
from .errors import ExportError

FORMAT = "tvm_fuse.compiled_model"
FORMAT_VERSION = 2  # 2: weights in a file of their own


def metadata_path(library: Path) -> Path:
    """Where the metadata of the library at `library` lives."""
    return library.with_suffix(".json")


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as stream:
        for block in iter(lambda: stream.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def weights_path(library: Path) -> Path:
    """Where the weights of the library at `library` live."""
    return library.with_suffix(".weights")


def fallback_path(library: Path) -> Path:
    """Where the library of a model's build without AMX lives (`CompiledModel.fallback`)."""
    return library.with_name(f"{library.stem}.noamx{library.suffix or '.so'}")


def export(model, library: Path) -> Path:
    """Write `model` (a CompiledModel built in this process) to `library` and its metadata,
    and its build without AMX, if it has one, to `fallback_path(library)`."""
    library = Path(library)
    meta = metadata_path(library)
    if library.suffix == ".json":
        raise ExportError(f"{library} would collide with its metadata file; use a .so path")
    if not library.parent.is_dir():
        raise ExportError(f"cannot export to {library}: directory {library.parent} does not exist")
    if not hasattr(model._library, "export_library"):
        raise ExportError("this model was loaded from a library; copy its files instead")

    tag = f".tmp-{os.getpid()}"
    builds = {library: model}
    if model.fallback is not None:
        builds[fallback_path(library)] = model.fallback
    files = [meta, *(path for code in builds for path in (code, weights_path(code)))]
    temporary = {path: path.with_name(f".{path.name}{tag}") for path in files}
    try:
        record = {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "tvm_fuse_version": __version__,
            "tvm_version": tvm.__version__,
            **model.metadata(),
        }
        for path, build in builds.items():
            written = _write_loaded(build, path, temporary)
            (record if build is model else record["fallback"]).update(written)
        temporary[meta].write_text(json.dumps(record, indent=2))
        # Metadata first: a library is only ever in place with the metadata that describes it,
        # and `load` checks the hashes for the moment between the renames.
        for path in files:
            os.replace(temporary[path], path)
    finally:
        for leftover in temporary.values():
            leftover.unlink(missing_ok=True)
    return library


def _write_loaded(model, library: Path, temporary: dict[Path, Path]) -> dict:
    """Write `model`'s library and weights to their `temporary` paths; what the metadata says of them."""
    weights = weights_path(library)
    try:
        with quiet_stderr():
            model._library.export_library(str(temporary[library]))
        tensors = weights_file.write(temporary[weights], model._weights)
    except Exception as error:
        raise ExportError(f"cannot write the library {library} or its weights: {error}") from error
    return {"library": library.name, "library_sha256": _sha256(temporary[library]),
            "weights": {"file": weights.name, "sha256": _sha256(temporary[weights]), "tensors": tensors}}


def load(library: str | os.PathLike):
    """Reopen a model saved with `CompiledModel.export(library)`; the ONNX file is not needed.
    A process that imported TVM's runtime alone (`TVM_USE_RUNTIME_LIB=1`) loads it too."""
    from .compiled_model import CompiledModel

    library = Path(library)
    meta = metadata_path(library)
    if not library.is_file():
        raise ExportError(f"no exported model at {library}")
    if not meta.is_file():
        raise ExportError(f"{library} has no metadata file {meta}; export the model again")
    try:
        record = json.loads(meta.read_text())
    except (OSError, ValueError) as error:
        raise ExportError(f"cannot read the metadata {meta}: {error}") from None
    if not isinstance(record, dict) or record.get("format") != FORMAT:
        raise ExportError(f"{meta} is not tvm_fuse metadata")
    if record.get("format_version", 0) > FORMAT_VERSION:
        raise ExportError(
            f"{meta} has format version {record['format_version']}; this tvm_fuse reads up to "
            f"{FORMAT_VERSION}: upgrade tvm_fuse"
        )
    module, weights = _loaded(library, record, meta)
    fallback = None
    if "fallback" in record:
        fallback = _loaded(library.with_name(record["fallback"]["library"]), record["fallback"], meta)
    return CompiledModel.from_metadata(module, record, weights, fallback)


def _checked(path: Path, sha256: str | None, meta: Path) -> Path:
    if not path.is_file():
        raise ExportError(f"no file {path}, which {meta} names; export the model again")
    if sha256 != _sha256(path):
        raise ExportError(f"{path} does not match its metadata {meta} (another export?); export again")
    return path


def _loaded(library: Path, record: dict, meta: Path) -> tuple[tvm.runtime.Module, list]:
    """The library and weights `record` describes, checked against their hashes."""
    _checked(library, record.get("library_sha256"), meta)
    weights = record.get("weights", {"tensors": []})  # format 1: the weights inside the library
    if weights["tensors"]:
        path = _checked(library.with_name(weights["file"]), weights.get("sha256"), meta)
        try:
            tensors = weights_file.read(path, weights["tensors"])
        except (OSError, ValueError) as error:
            raise ExportError(f"cannot read the weights {path}: {error}") from None
    else:
        tensors = []
    try:
        with quiet_stderr():
            return tvm.runtime.load_module(str(library)), tensors
    except Exception as error:
        raise ExportError(f"cannot load the library {library}: {error}") from None
