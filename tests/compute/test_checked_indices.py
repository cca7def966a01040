"""The index check (`compute.checked_indices`) compiled alone: negative indices counted from
the end of their axis, each column of an index tuple against its own axis, a symbolic extent
passed as a scalar, and an IndexError with the message at an index outside."""

import numpy as np
import pytest
import tvm
from tvm import te, tirx

from tvm_fuse.compute.checked_indices import checked_indices


@pytest.mark.parametrize("dtype", ["int32", "int64"])
def test_indices_are_normalized_or_refused(dtype):
    rows, size = tirx.Var("rows", "int64"), tirx.Var("size", "int64")  # size: a dim of the data alone
    func, scalars = checked_indices(te.placeholder((rows, 2), dtype), [tirx.IntImm("int64", 3), size], "bad index")
    assert [v.name for v in scalars] == ["size"]
    kernel = tvm.compile(tvm.IRModule({"check": func.with_attr("global_symbol", "check")}), target="llvm")["check"]

    def run(indices, extent: int):
        out = tvm.runtime.tensor(np.zeros_like(indices))
        kernel(tvm.runtime.tensor(indices), extent, out)
        return out.numpy()

    indices = np.array([[0, -5], [-3, 4], [2, -1]], dtype)
    np.testing.assert_array_equal(run(indices, 5), [[0, 0], [0, 4], [2, 4]])
    with pytest.raises(IndexError, match="bad index"):
        run(indices, 4)  # 4 lies outside an axis of 4
    with pytest.raises(IndexError, match="bad index"):
        run(np.array([[3, 0]], dtype), 5)  # 3 outside the first column's axis of 3
