"""Exported models on disk: a shared library and a JSON file of metadata beside it.

`model.so` holds the code, `model.json` the signature and target plus the library's SHA-256,
so a library and a metadata file from two different exports are never paired silently.
Both files are written under temporary names and renamed into place: an export that is
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


def export(model, library: Path) -> Path:
    """Write `model` (a CompiledModel built in this process) to `library` and its metadata."""
    library = Path(library)
    meta = metadata_path(library)
    if library.suffix == ".json":
        raise ExportError(f"{library} would collide with its metadata file; use a .so path")
    if not library.parent.is_dir():
        raise ExportError(f"cannot export to {library}: directory {library.parent} does not exist")
    if not hasattr(model._library, "export_library"):
        raise ExportError("this model was loaded from a library; copy its files instead")

    tag = f".tmp-{os.getpid()}"
    library_tmp = library.with_name(f".{library.name}{tag}")
    meta_tmp = meta.with_name(f".{meta.name}{tag}")
    try:
        try:
            with quiet_stderr():
                model._library.export_library(str(library_tmp))
        except Exception as error:
            raise ExportError(f"cannot write the library {library}: {error}") from error
        record = {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "tvm_fuse_version": __version__,
            "tvm_version": tvm.__version__,
            "library": library.name,
            "library_sha256": _sha256(library_tmp),
            **model.metadata(),
        }
        meta_tmp.write_text(json.dumps(record, indent=2))
        # Metadata first: a library is only ever in place with the metadata that describes it,
        # and `load` checks the hash for the moment between the two renames.
        os.replace(meta_tmp, meta)
        os.replace(library_tmp, library)
    finally:
        for leftover in (library_tmp, meta_tmp):
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
    if record.get("library_sha256") != _sha256(library):
        raise ExportError(f"{library} does not match its metadata {meta} (another export?); export again")
    try:
        with quiet_stderr():
            module = tvm.runtime.load_module(str(library))
    except Exception as error:
        raise ExportError(f"cannot load the library {library}: {error}") from None
    return CompiledModel.from_metadata(module, record)
