"""weights_file: a model's weights written as raw tensors and mapped back without a copy."""

from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
import tvm

from tvm_fuse import weights_file
from tvm_fuse.ir_names import TVM_ALIGNMENT


def _tensors():
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal((3, 5, 7)).astype(np.float32), rng.integers(-128, 128, (33,), dtype=np.int8),
              rng.integers(0, 1 << 30, (2, 3), dtype=np.int32), rng.integers(-9, 9, (5,), dtype=np.int64),
              rng.random((7,)) < 0.5]
    bf16 = tvm.runtime.empty((4, 9), "bfloat16")
    bf16.copyfrom(rng.standard_normal((4, 9)).astype(ml_dtypes.bfloat16))
    return [tvm.runtime.tensor(a) for a in arrays] + [bf16]


def _mapping(path: Path) -> list[tuple[int, int]]:
    """The address ranges at which this process maps `path`."""
    ranges = []
    for line in Path("/proc/self/maps").read_text().splitlines():
        if line.endswith(str(path)):
            start, end = line.split()[0].split("-")
            ranges.append((int(start, 16), int(end, 16)))
    return ranges


def _address(tensor) -> int:
    return np.from_dlpack(tensor._create_view((1,), "uint8")).ctypes.data


def test_weights_read_back_bit_identical_aligned_and_mapped_from_the_file(tmp_path):
    tensors = _tensors()
    path = tmp_path / "model.weights"
    entries = weights_file.write(path, tensors)
    read = weights_file.read(path, entries)
    mapped = _mapping(path)
    for original, again in zip(tensors, read, strict=True):
        assert (again.shape, again.dtype) == (original.shape, original.dtype)
        np.testing.assert_array_equal(again.numpy(), original.numpy())
        address = _address(again)
        assert address % TVM_ALIGNMENT == 0
        assert any(start <= address < end for start, end in mapped)  # no copy


def test_a_weights_file_shorter_than_its_entries_is_refused(tmp_path):
    path = tmp_path / "model.weights"
    entries = weights_file.write(path, _tensors())
    path.write_bytes(path.read_bytes()[:-8])
    with pytest.raises(ValueError, match="does not hold a weight"):
        weights_file.read(path, entries)
