"""The LRN kernel against the ONNX operator's definition, in numpy: every window size (even ones
too, whose window ONNX places asymmetrically), the exponents it computes by Newton's steps, by
square roots and by `powf`, and 3-D inputs."""

from __future__ import annotations

import re

import numpy as np
import pytest
import tvm
from tvm import te

from tvm_fuse.compute.lrn import local_response_norm
from tvm_fuse.ir_names import KNOBS_ATTR
from tvm_fuse.pipeline import TIR_PIPELINE
from tvm_fuse.schedules import apply, knob_space
from tvm_fuse.target import parse_target


def lrn_reference(x: np.ndarray, size: int, alpha: float, beta: float, bias: float) -> np.ndarray:
    """ONNX's LRN: channels c - floor((size-1)/2) .. c + ceil((size-1)/2) of axis 1, in float64."""
    x64, channels = x.astype(np.float64), x.shape[1]
    squares = np.zeros_like(x64)
    for c in range(channels):
        low, high = max(0, c - (size - 1) // 2), min(channels - 1, c + -(-(size - 1) // 2))
        squares[:, c] = (x64[:, low:high + 1] ** 2).sum(axis=1)
    with np.errstate(invalid="ignore"):  # inf / inf: NaN, as ONNX Runtime gives
        return x64 / (bias + alpha / size * squares) ** beta


def _run(shape, size, alpha, beta, bias, knobs=None, values=None):
    x = values if values is not None else np.random.default_rng(0).standard_normal(shape).astype(np.float32) * 3
    data = te.placeholder(x.shape, "float32", name="x")
    func = apply(te.create_prim_func([data, local_response_norm(data, size, alpha, beta, bias)]), 16, knobs)
    assert func.attrs[KNOBS_ATTR] == ("tuned" if knobs else "default")
    kernel = tvm.compile(tvm.IRModule({"main": func}), target=parse_target("native"), tir_pipeline=TIR_PIPELINE)
    out = tvm.runtime.tensor(np.zeros(x.shape, np.float32))
    kernel["main"](tvm.runtime.tensor(x), out)
    return out.numpy(), lrn_reference(x, size, alpha, beta, bias)


@pytest.mark.avx512
@pytest.mark.parametrize("shape, size, alpha, beta, bias", [
    ((1, 64, 14, 14), 5, 1e-2, 0.75, 1.0),  # GoogLeNet's (Newton's steps)
    ((2, 24, 7, 9), 4, 5e-2, 0.75, 2.0),  # an even window: one channel more after c than before
    ((1, 16, 6, 6), 3, 1e-1, 0.5, 1.0),  # x^-1/2, Newton's steps squared
    ((1, 16, 6, 6), 5, 1e-1, 0.75, 0.0),  # no bias: square roots (a sum may be 0)
    ((1, 16, 6, 6), 5, 1e-1, 0.6, 1.0),  # any other exponent: powf
    ((1, 12, 20), 1, 1e-1, 0.75, 1.0),  # 3-D, a window of one
    ((1, 16, 5, 7), 5, 1e-2, 0.75, 1.0),  # 35 pixels a channel: 2 vectors, then 3 pixels one at a time
])
def test_lrn_is_the_onnx_definition(shape, size, alpha, beta, bias):
    ours, expected = _run(shape, size, alpha, beta, bias)
    np.testing.assert_allclose(ours, expected, rtol=2e-6, atol=1e-30)


@pytest.mark.avx512
def test_every_vector_width_computes_the_same():
    """35 pixels a channel: each width leaves a remainder, computed one pixel at a time."""
    for knobs in knob_space(te.create_prim_func(
            [x := te.placeholder((1, 8, 5, 7), "float32", name="x"), local_response_norm(x, 5, 1e-2, 0.75, 1.0)]), 16):
        ours, expected = _run((1, 8, 5, 7), 5, 1e-2, 0.75, 1.0, knobs)
        np.testing.assert_allclose(ours, expected, rtol=2e-6)


def test_a_channel_of_an_odd_pixel_count_runs_a_vector_at_a_time():
    """GoogLeNet's 55 x 55 channels: 189 vectors of 16 pixels, then the last pixel alone (no
    vector width divides 3025, so the whole channel ran one pixel at a time before)."""
    x = te.placeholder((1, 8, 55, 55), "float32", name="x")
    script = apply(te.create_prim_func([x, local_response_norm(x, 5, 1e-4, 0.75, 1.0)]), 16).script()
    assert re.search(r"in range\(189\):\s+for \w+ in T\.vectorized\(16\)", script), script


@pytest.mark.avx512
def test_infinities_and_nans_as_the_definition_gives_them():
    x = np.ones((1, 4, 2, 16), np.float32)
    x[0, 1, 0, 3], x[0, 2, 1, 5] = np.inf, np.nan
    ours, expected = _run(x.shape, 3, 1e-1, 0.75, 1.0, values=x)
    np.testing.assert_array_equal(np.isnan(ours), np.isnan(expected))
    finite = np.isfinite(expected)
    np.testing.assert_allclose(ours[finite], expected[finite], rtol=2e-6)
