"""A conv head of 1000 channels computes 1024 with zero weights, cut back after its chain; a
dense head of 6625 columns likewise computes 6656."""

from __future__ import annotations

import numpy as np
import pytest
import tvm
import tvm_ffi
from tvm import relax

from tests.transform.relax_modules import module, run
from tvm_fuse.transform.pad_output_channels import PadOutputChannels

_RNG = np.random.default_rng(0)


def _const(*shape):
    return relax.const(_RNG.standard_normal(shape).astype("float32"))


def _head(channels: int, second_reader: bool = False, keepdims: bool = False) -> tvm.IRModule:
    """conv 1x1 (8 -> channels) + bias + relu [+ the relu read twice] -> mean."""

    def build(bb, x):
        conv = bb.emit(relax.op.nn.conv2d(x, _const(channels, 8, 1, 1)))
        relu = bb.emit(relax.op.nn.relu(bb.emit(relax.op.add(conv, _const(1, channels, 1, 1)))))
        if second_reader:
            relu = bb.emit(relax.op.add(relu, relax.op.sigmoid(relu)))
        return bb.emit(relax.op.mean(relu, axis=[2, 3], keepdims=keepdims))

    return module({"x": (1, 8, 5, 5)}, build)


def _ops(mod) -> list[str]:
    return [b.value.op.name for block in mod["main"].body.blocks for b in block.bindings
            if isinstance(b.value, relax.Call)]


@pytest.mark.parametrize("second_reader", [False, True])
def test_the_conv_and_its_chain_run_padded_and_are_cut_once(second_reader):
    mod = _head(1000, second_reader)
    padded = PadOutputChannels(16)(mod)
    ops = _ops(padded)
    # The cut follows the relu either way: only the relu has a second reader.
    assert ops[:4] == ["relax.nn.conv2d", "relax.add", "relax.nn.relu", "relax.strided_slice"]
    conv = next(b.value for block in padded["main"].body.blocks for b in block.bindings
                if isinstance(b.value, relax.Call) and b.value.op.name == "relax.nn.conv2d")
    assert [int(d) for d in conv.ty.shape] == [1, 1024, 5, 5]
    x = _RNG.standard_normal((1, 8, 5, 5)).astype("float32")
    np.testing.assert_allclose(run(padded, {"x": x})[0], run(mod, {"x": x})[0], rtol=1e-5, atol=1e-5)


def test_a_global_pool_keeping_its_dims_runs_padded_and_is_cut_after():
    """A pool that keeps the channel axis in place can run in the conv chain's blocks."""
    mod = _head(1000, keepdims=True)
    padded = PadOutputChannels(16)(mod)
    assert _ops(padded) == ["relax.nn.conv2d", "relax.add", "relax.nn.relu", "relax.mean", "relax.strided_slice"]
    x = _RNG.standard_normal((1, 8, 5, 5)).astype("float32")
    np.testing.assert_allclose(run(padded, {"x": x})[0], run(mod, {"x": x})[0], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("channels", [24, 20, 64, 9])
def test_channel_counts_padding_would_cost_much_are_left_alone(channels):
    mod = _head(channels)
    assert tvm_ffi.structural_equal(PadOutputChannels(16)(mod), mod)


@pytest.mark.parametrize("columns, padded_columns", [(6625, 6656), (258, 272), (37, 48)])
def test_a_dense_head_runs_padded_and_is_cut_on_its_last_axis(columns, padded_columns):
    """x[40, 120] @ W[120, 6625] + bias -> relu, as PP-OCRv4 rec's character head: 6656 columns
    pack in vector blocks, 6625 did not (the kernel ran one column at a time). Silero VAD's
    STFT has 258 columns, which only blocks of 2 divide: 5% of padding buys 8x wider vectors;
    a CRNN's 37 character classes, 30% for 16x."""

    def build(bb, x):
        dense = bb.emit(relax.op.matmul(x, _const(120, columns)))
        return bb.emit(relax.op.nn.relu(bb.emit(relax.op.add(dense, _const(columns)))))

    mod = module({"x": (40, 120)}, build)
    padded = PadOutputChannels(16)(mod)
    assert _ops(padded) == ["relax.matmul", "relax.add", "relax.nn.relu", "relax.strided_slice"]
    dense = next(b.value for block in padded["main"].body.blocks for b in block.bindings
                 if isinstance(b.value, relax.Call) and b.value.op.name == "relax.matmul")
    assert [int(d) for d in dense.ty.shape] == [40, padded_columns]
    x = _RNG.standard_normal((40, 120)).astype("float32")
    np.testing.assert_allclose(run(padded, {"x": x})[0], run(mod, {"x": x})[0], rtol=1e-5, atol=1e-5)


def test_a_conv_reading_the_chain_takes_its_padded_channels_with_zero_weights():
    """A face detector's conv (3 -> 28) + bias + PRelu (as `SlopesToMax` leaves it: max(x,
    x * slopes)) + max-pool feeding a conv (28 -> 48): the chain runs at 32 channels into the
    next conv, whose weights get 4 zero input channels; nothing is cut, so the whole chain can
    run in blocks of 16."""

    def build(bb, x):
        conv = bb.emit(relax.op.nn.conv2d(x, _const(28, 3, 3, 3)))
        biased = bb.emit(relax.op.add(conv, _const(1, 28, 1, 1)))
        slopes = relax.const(_RNG.uniform(0, 1, (28, 1, 1)).astype("float32"))
        prelu = bb.emit(relax.op.maximum(biased, bb.emit(relax.op.multiply(biased, slopes))))
        pooled = bb.emit(relax.op.nn.max_pool2d(prelu, [3, 3], [2, 2], padding=[0, 0, 1, 1]))
        return bb.emit(relax.op.nn.conv2d(pooled, _const(48, 28, 3, 3)))

    mod = module({"x": (2, 3, 24, 24)}, build)
    padded = PadOutputChannels(16)(mod)
    assert "relax.strided_slice" not in _ops(padded)
    convs = [b.value for block in padded["main"].body.blocks for b in block.bindings
             if isinstance(b.value, relax.Call) and b.value.op.name == "relax.nn.conv2d"]
    assert [[int(d) for d in c.args[1].ty.shape] for c in convs] == [[32, 3, 3, 3], [48, 32, 3, 3]]
    x = _RNG.standard_normal((2, 3, 24, 24)).astype("float32")
    np.testing.assert_allclose(run(padded, {"x": x})[0], run(mod, {"x": x})[0], rtol=1e-5, atol=1e-5)
