"""A concat whose inputs lie back to back in its output (batch 1, channel axis) costs no copy:
the kernels that make its inputs write into slices of its buffer. Where that cannot hold, the
concat stays a kernel. Either way the outputs are TVM's own."""

from __future__ import annotations

import numpy as np
import pytest
import tvm
from tvm import relax

from tvm_fuse.ir_names import CONCAT_AXIS_ATTR
from tvm_fuse.pipeline import compile_lowered, finalize, lowered, optimize
from tvm_fuse.target import parse_target
from tvm_fuse.transform.concat_in_place import ConcatInPlace

_RNG = np.random.default_rng(0)
_TARGET = "llvm"  # runs on any host: the pass is the same for every ISA


def _const(*shape):
    return relax.const(_RNG.standard_normal(shape).astype("float32") * 0.2)


def _conv(bb, x, out_channels, in_channels, kernel=1):
    return bb.emit(relax.op.nn.relu(bb.emit(relax.op.nn.conv2d(
        x, _const(out_channels, in_channels, kernel, kernel), padding=kernel // 2))))


def _module(build, batch=1, channels=16, size=8):
    """`main(x)` with `build(bb, x)` giving its output; x is [batch, channels, size, size]."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((batch, channels, size, size), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            out = build(bb, x)
            out = bb.emit_output(out)
        bb.emit_func_output(out)
    return bb.get(), _RNG.standard_normal((batch, channels, size, size)).astype("float32")


def fire(bb, x):
    """SqueezeNet's fire module: a squeeze conv, then a 1x1 and a 3x3 expand concatenated."""
    squeeze = _conv(bb, x, 16, 16)
    return bb.emit(relax.op.concat([_conv(bb, squeeze, 32, 16), _conv(bb, squeeze, 32, 16, 3)], axis=1))


def dense_block(bb, x):
    """DenseNet's block: each layer's conv reads the concat of all before it."""
    features = _conv(bb, x, 16, 16)
    for _ in range(3):
        grown = _conv(bb, features, 16, features.ty.shape.values[1].value, 3)
        features = bb.emit(relax.op.concat([features, grown], axis=1))
    return bb.emit(relax.op.mean(features, axis=[2, 3], keepdims=True))


def unaligned(bb, x):
    """Inputs of 3 channels on a 3x3 map: 108 bytes each, in any layout."""
    return bb.emit(relax.op.concat([_conv(bb, x, 3, 16), _conv(bb, x, 3, 16, 3)], axis=1))


def with_a_graph_input(bb, x):
    return bb.emit(relax.op.concat([x, _conv(bb, x, 16, 16)], axis=1))


def _vm_form(mod):
    """`mod` as the VM runs it, up to and including `ConcatInPlace`; and the executable."""
    target = parse_target(_TARGET)
    mod = lowered(optimize(mod, target), target)
    passes = finalize(target)
    upto = next(i for i, p in enumerate(passes) if p.info.name == ConcatInPlace().info.name)
    with target:
        vm_form = tvm.transform.Sequential(passes[:upto + 1])(mod)
    return vm_form, compile_lowered(mod, target)


def _concat_calls(mod) -> int:
    """Calls of a concat kernel: `R.call_tir(concatenate, ...)`, or in the VM's form `concatenate(...)`."""
    callees = [b.value.args[0] if b.value.op.same_as(tvm.ir.Op.get("relax.call_tir")) else b.value.op
               for block in mod["main"].body.blocks for b in block.bindings if isinstance(b.value, relax.Call)]
    return sum(1 for c in callees if isinstance(c, relax.GlobalVar) and CONCAT_AXIS_ATTR in (mod[c].attrs or {}))


def _slices(mod) -> int:
    return mod["main"].script().count("R.memory.ensure_zero_offset(")


def _run(executable, x):
    out = relax.VirtualMachine(executable, tvm.cpu())["main"](tvm.runtime.tensor(x))
    return [out.numpy()] if isinstance(out, tvm.runtime.Tensor) else [o.numpy() for o in out]


def _reference(mod, x):
    return _run(tvm.compile(mod, target=parse_target(_TARGET)), x)


@pytest.mark.parametrize("build, concats, slices", [(fire, 1, 2), (dense_block, 3, 6)])
def test_concat_inputs_are_written_into_its_buffer_and_the_outputs_are_tvms(build, concats, slices):
    mod, x = _module(build)
    assert _concat_calls(lowered(optimize(mod, parse_target(_TARGET)), parse_target(_TARGET))) == concats
    vm_form, executable = _vm_form(mod)
    assert _concat_calls(vm_form) == 0
    assert _slices(vm_form) == slices
    for ours, reference in zip(_run(executable, x), _reference(mod, x)):
        np.testing.assert_allclose(ours, reference, rtol=1e-4, atol=1e-4 * np.abs(reference).max())


@pytest.mark.parametrize("build, batch, size", [
    (fire, 2, 8),  # batch 2: each input's slices are not contiguous
    (unaligned, 1, 3),  # the second slice would not start on 64 bytes
    (with_a_graph_input, 1, 8),  # no kernel writes the graph's input
])
def test_a_concat_whose_inputs_cannot_be_its_slices_stays_a_kernel(build, batch, size):
    mod, x = _module(build, batch=batch, size=size)
    vm_form, executable = _vm_form(mod)
    assert _concat_calls(vm_form) == 1
    for ours, reference in zip(_run(executable, x), _reference(mod, x)):
        np.testing.assert_allclose(ours, reference, rtol=1e-4, atol=1e-4 * np.abs(reference).max())
