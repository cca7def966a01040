"""Dense layers with packed weights (`schedules.dense_packed`): an input larger than L2 is taken
a chunk of rows at a time (`row_chunk`), with the same outputs."""

from __future__ import annotations

import numpy as np
import pytest
from tvm import tirx

import tvm_fuse
from tests.conftest import dense_model
from tvm_fuse.schedules.dense_packed import CHUNK_INPUT_BYTES, row_chunk


@pytest.mark.parametrize("row_dims, depth", [((8, 128), 1536), ((8, 128), 384), ((1, 384), 1536), ((2, 256), 1024)])
def test_a_large_input_is_chunked_in_the_largest_whole_row_tiles_that_fit(row_dims, depth):
    rows = int(np.prod(row_dims))
    assert rows * depth * 4 > CHUNK_INPUT_BYTES
    chunk = row_chunk(row_dims, depth, 8)
    fitting = [c for c in range(8, rows, 8) if rows % c == 0 and c * depth * 4 <= CHUNK_INPUT_BYTES]
    assert chunk == max(fitting)


@pytest.mark.parametrize("row_dims, depth", [((1, 128), 1536), ((1, 384), 384)])
def test_an_input_that_fits_or_a_symbolic_row_count_is_one_chunk(row_dims, depth):
    assert row_chunk(row_dims, depth, 8) is None
    assert row_chunk((1, tirx.Var("tokens", "int64")), depth, 8) is None


def test_a_chunked_dense_layer_matches_numpy():
    model = dense_model((2, 256), 1024, 256)  # 2 MB of input: chunks of 256 rows
    assert row_chunk((2, 256), 1024, 8) == 256
    x = np.random.default_rng(1).standard_normal((2, 256, 1024)).astype(np.float32)
    weight = np.frombuffer(model.graph.initializer[0].raw_data, np.float32).reshape(1024, 256)
    (y,) = tvm_fuse.build(model, "llvm").run(None, {"x": x})
    np.testing.assert_allclose(y, np.maximum(x @ weight, 0), rtol=1e-4, atol=1e-3)
