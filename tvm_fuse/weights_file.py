"""A model's weights as a file of raw tensors, each at an aligned offset, which a load maps
instead of reading: no copy of a weight is made, its pages are read as the first run touches
them, and processes that map one file share them (the page cache; forked workers too).

The mapping is private: a write would change the process's copy, never the file.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import tvm

from .ir_names import TVM_ALIGNMENT


def _raw_bytes(tensor: tvm.runtime.Tensor) -> np.ndarray:
    """`tensor`'s data as bytes, without a copy (numpy has no bfloat16 to read it as)."""
    nbytes = int(np.prod(tensor.shape, dtype=np.int64)) * tensor.dtype.itemsize
    return np.from_dlpack(tensor._create_view((nbytes,), "uint8"))


def write(path: Path, tensors) -> list[dict]:
    """Write `tensors` to `path`; return what `read` needs to map them again, in order."""
    entries, offset = [], 0
    with open(path, "wb") as stream:
        for tensor in tensors:
            offset = -(-offset // TVM_ALIGNMENT) * TVM_ALIGNMENT
            stream.seek(offset)
            data = _raw_bytes(tensor)
            stream.write(data)
            entries.append({"offset": offset, "shape": list(tensor.shape), "dtype": str(tensor.dtype)})
            offset += data.nbytes
    return entries


def read(path: Path, entries: list[dict]) -> list[tvm.runtime.Tensor]:
    """The tensors `write` wrote to `path`, mapped from it."""
    if not entries:
        return []
    mapped = np.memmap(path, dtype=np.uint8, mode="c")  # copy-on-write: writable, as DLPack needs
    tensors = []
    for entry in entries:
        dtype = tvm.runtime.DataType(entry["dtype"])
        nbytes = int(np.prod(entry["shape"], dtype=np.int64)) * dtype.itemsize
        start = entry["offset"]
        if start % TVM_ALIGNMENT or start + nbytes > mapped.size:
            raise ValueError(f"{path} does not hold a weight of {nbytes} bytes at offset {start}")
        raw = tvm.runtime.from_dlpack(mapped[start:start + nbytes])
        tensors.append(raw._create_view(entry["shape"], entry["dtype"]))
    return tensors
