"""The direct NC[spatial] conv (`compute.conv.convolution`, `schedules.conv_nchw`), which takes
the convs the blocked layout does not: its parallel tasks and the input it reads."""

from __future__ import annotations

import re

import numpy as np
import pytest
import tvm
from tvm import te

import tvm_fuse
from tests.conftest import assert_close, conv_model, ort_outputs
from tests.schedules.amx.test_conv import VECTOR_HOST
from tvm_fuse.compute.conv import convolution
from tvm_fuse.schedules import apply


def _scheduled(in_channels: int, out_channels: int, rows: int, width, kernel: int, pad: int, stride: int = 1) -> str:
    data = te.placeholder((1, in_channels, rows, width), name="data")
    weight = te.placeholder((out_channels, in_channels, kernel, kernel), name="weight")
    conv = convolution(data, weight, (1, stride), (pad,) * 4, (1, 1), 1)
    return apply(te.create_prim_func([data, weight, conv]), 16).script()


def test_a_conv_of_few_output_channels_splits_its_rows_between_cores():
    # trueocr_det's 16 -> 4 channel 1x1 at 512 x 368 ran on one core: a task per channel tile.
    assert re.search(r"in T.parallel\(24\)", _scheduled(16, 4, 24, 64, 1, 0))


def test_a_conv_of_many_output_channels_splits_them_alone():
    assert re.search(r"in T.parallel\(64\)", _scheduled(16, 512, 24, 64, 1, 0))


@pytest.mark.parametrize("width, kernel, pad, copied", [(144, 1, 0, False), (150, 1, 0, True), (144, 3, 1, True)])
def test_an_unpadded_conv_whose_rows_vectors_divide_reads_its_input_in_place(width, kernel, pad, copied):
    # Computed to whole tiles of 32 columns it would need a padded copy of its input, which
    # cost trueocr_det's 1x1 more than the conv itself; a padded conv has the copy anyway.
    assert ('T.sblock("pad")' in _scheduled(16, 4, 4, width, kernel, pad)) == copied


@pytest.mark.parametrize("width", [144, 150])
def test_a_conv_of_few_channels_matches_onnx_runtime(width):
    model = conv_model((1, 16, 9, width), 4)
    feed = {"x": np.random.default_rng(1).standard_normal((1, 16, 9, width)).astype(np.float32)}
    assert_close(tvm_fuse.build(model, target=VECTOR_HOST).run(None, feed), ort_outputs(model, feed))


@pytest.mark.parametrize("stride, vectors", [(1, 2), (2, 0)])
def test_a_symbolic_row_is_computed_in_whole_vectors_unless_strided(stride, vectors):
    """Rounded up to two vectors and cropped: trueocr's 1-D convs over a symbolic length ran
    scalar, 3% of the FMA peak. A strided row stays scalar: its vectors would gather the input."""
    text = _scheduled(16, 8, 1, tvm.tirx.Var("w", "int64"), 3, 1, stride)
    update = text.split('T.sblock("conv_update")')[0].split("T.grid(16, 3, 3)")[-1]  # the tile's loops
    assert ("T.vectorized(T.int64(16))" in update) == (vectors > 0), update
    assert ("T.unroll(T.int64(2))" in update) == (vectors == 2), update


def test_a_conv_over_symbolic_rows_and_columns_matches_onnx_runtime():
    """Its size known only at run time: its rows rounded up to whole vectors by expressions of
    the width, then cropped (the crop read the sizes as ints and failed to build; found by the
    differential net's integer family, a 1x1 ConvInteger)."""
    model = conv_model((1, 1, 5, 7), 3, relu=False)
    model.graph.input[0].type.tensor_type.shape.dim[2].dim_param = "h"
    model.graph.input[0].type.tensor_type.shape.dim[3].dim_param = "w"
    model.graph.output[0].type.tensor_type.shape.dim[2].dim_param = "h"
    model.graph.output[0].type.tensor_type.shape.dim[3].dim_param = "w"
    compiled = tvm_fuse.build(model, target=VECTOR_HOST)
    for shape in [(1, 1, 5, 7), (1, 1, 2, 33)]:
        feed = {"x": np.random.default_rng(2).standard_normal(shape).astype(np.float32)}
        assert_close(compiled.run(None, feed), ort_outputs(model, feed))
