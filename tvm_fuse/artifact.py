"""Exported models on disk: a shared library and a JSON file of metadata beside it.

`model.so` holds the code, `model.json` the signature and target plus the library's SHA-256,
so a library and a metadata file from two different exports are never paired silently. A model
with kernels on AMX tiles also writes its build without AMX, `model.noamx.so`, whose hash the
metadata holds too.
All files are written under temporary names and renamed into place: an export that is
interrupted leaves the previous files, never half-written ones.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import tvm

from ._native import quiet_stderr
from ._version import __version__
from .errors import ExportError

FORMAT = "tvm_fuse.compiled_model"
FORMAT_VERSION = 1


def metadata_path(library: Path) -> Path:
    """Where the metadata of the library at `library` lives."""
    return library.with_suffix(".json")


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as stream:
        for block in iter(lambda: stream.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


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
    libraries = {library: model._library}
    if model.fallback is not None:
        libraries[fallback_path(library)] = model.fallback._library
    temporary = {path: path.with_name(f".{path.name}{tag}") for path in [*libraries, meta]}
    try:
        for path, code in libraries.items():
            try:
                with quiet_stderr():
                    code.export_library(str(temporary[path]))
            except Exception as error:
                raise ExportError(f"cannot write the library {path}: {error}") from error
        record = {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "tvm_fuse_version": __version__,
            "tvm_version": tvm.__version__,
            "library": library.name,
            "library_sha256": _sha256(temporary[library]),
            **model.metadata(),
        }
        if model.fallback is not None:
            fallback = fallback_path(library)
            record["fallback"].update(library=fallback.name, library_sha256=_sha256(temporary[fallback]))
        temporary[meta].write_text(json.dumps(record, indent=2))
        # Metadata first: a library is only ever in place with the metadata that describes it,
        # and `load` checks the hashes for the moment between the renames.
        for path in [meta, *reversed(libraries)]:
            os.replace(temporary[path], path)
    finally:
        for leftover in temporary.values():
            leftover.unlink(missing_ok=True)
    return library


def load(library: str | os.PathLike):
    """Reopen a model written by `CompiledModel.export`."""
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
    module = _module(library, record, meta)
    fallback = None
    if "fallback" in record:
        fallback = _module(library.with_name(record["fallback"]["library"]), record["fallback"], meta)
    return CompiledModel.from_metadata(module, record, fallback)


def _module(library: Path, record: dict, meta: Path) -> tvm.runtime.Module:
    """The library `record` describes, checked against its hash."""
    if not library.is_file():
        raise ExportError(f"no library {library}, which {meta} names; export the model again")
    if record.get("library_sha256") != _sha256(library):
        raise ExportError(f"{library} does not match its metadata {meta} (another export?); export again")
    try:
        with quiet_stderr():
            return tvm.runtime.load_module(str(library))
    except Exception as error:
        raise ExportError(f"cannot load the library {library}: {error}") from None
