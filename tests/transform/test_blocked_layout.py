"""Conv chains run in NCHW{c}c with layout transforms only at their borders."""

from __future__ import annotations

import numpy as np
import pytest
import tvm
from tvm import relax

from tvm_fuse.pipeline import compile_lowered, lowered, optimize
from tvm_fuse.target import parse_target
from tvm_fuse.transform.blocked_layout import BlockedLayout

_RNG = np.random.default_rng(0)


def _const(*shape):
    return relax.const(_RNG.standard_normal(shape).astype("float32"))


def _chain(out_channels=32, in_channels=3):
    """conv(3 -> 32) -> relu -> max_pool -> conv(32 -> out) -> add residual -> mean."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, in_channels, 16, 16), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            c = bb.emit(relax.op.nn.conv2d(x, _const(32, in_channels, 3, 3), padding=1))
            r = bb.emit(relax.op.nn.relu(c))
            p = bb.emit(relax.op.nn.max_pool2d(r, (2, 2), (2, 2)))
            d = bb.emit(relax.op.nn.conv2d(p, _const(out_channels, 32, 1, 1)))
            s = bb.emit(relax.op.add(d, p) if out_channels == 32 else relax.op.nn.relu(d))
            out = bb.emit_output(bb.emit(relax.op.mean(s, axis=[2, 3], keepdims=True)))
        bb.emit_func_output(out)
    return bb.get()


def _calls(mod, op):
    return [b.value for b in mod["main"].body.blocks[0].bindings
            if isinstance(b.value, relax.Call) and b.value.op.same_as(tvm.ir.Op.get(op))]


def _run(mod, x, pipeline: bool):
    """`mod` on `x`, compiled by TVM alone or by tvm_fuse's whole pipeline (only it has
    kernels for blocked convs)."""
    target = parse_target("llvm -mcpu=skylake-avx512")
    if pipeline:
        mod = lowered(optimize(mod, target), target)
        executable = compile_lowered(mod, target)
    else:
        executable = tvm.compile(mod, target=target)
    return relax.VirtualMachine(executable, tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()


@pytest.mark.avx512
def test_a_chain_is_converted_once_in_and_once_out():
    mod = _chain()
    blocked = relax.transform.FoldConstant()(BlockedLayout(16)(mod))
    layouts = [(str(c.attrs.data_layout), str(c.attrs.kernel_layout), str(c.attrs.out_layout))
               for c in _calls(blocked, "relax.nn.conv2d")]
    # The image's 3 channels form one block of their own; the rest run in blocks of 16.
    assert layouts == [("NCHW3c", "OIHW3i16o", "NCHW16c"), ("NCHW16c", "OIHW16i16o", "NCHW16c")]
    assert len(_calls(blocked, "relax.layout_transform")) == 2  # weights were folded
    x = _RNG.standard_normal((1, 3, 16, 16)).astype("float32")
    np.testing.assert_allclose(_run(mod, x, pipeline=True), _run(mod, x, pipeline=False), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("out_channels, out_layout", [(24, "NCHW8c"), (20, "NCHW")])
def test_outputs_the_block_does_not_divide_take_half_a_block_or_nchw(out_channels, out_layout):
    blocked = BlockedLayout(16)(_chain(out_channels))
    layouts = [str(c.attrs.out_layout) for c in _calls(blocked, "relax.nn.conv2d")]
    assert layouts == ["NCHW16c", out_layout]


@pytest.mark.avx512
@pytest.mark.parametrize("in_channels, in_layout", [(24, "NCHW8c"), (20, "NCHW")])
def test_inputs_the_block_does_not_divide_take_half_a_block_or_nchw(in_channels, in_layout):
    mod = _chain(in_channels=in_channels)
    blocked = BlockedLayout(16)(mod)
    assert str(_calls(blocked, "relax.nn.conv2d")[0].attrs.data_layout) == in_layout
    x = _RNG.standard_normal((1, in_channels, 16, 16)).astype("float32")
    np.testing.assert_allclose(_run(mod, x, pipeline=True), _run(mod, x, pipeline=False), rtol=1e-4, atol=1e-4)
