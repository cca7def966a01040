"""Each composite becomes one opaque kernel that computes exactly what the unfused ops did."""

from __future__ import annotations

import numpy as np
import pytest
import tvm
from tvm import relax

from tests.patterns.chains import chain
from tests.transform.relax_modules import module, run
from tvm_fuse import provenance
from tvm_fuse.ir_names import PATTERN_ATTR
from tvm_fuse.pipeline import compile_lowered, lowered, optimize
from tvm_fuse.target import parse_target
from tvm_fuse.transform.fuse_patterns import FusePatterns
from tvm_fuse.transform.lower_composites import WINOGRAD_SWITCH, LowerComposites
from tvm_fuse.transform.record_provenance import RecordProvenance

CALL_TIR = tvm.ir.Op.get("relax.call_tir")


def kernel_calls(mod):
    return [b.value for block in mod["main"].body.blocks for b in block.bindings
            if isinstance(b.value, relax.Call) and b.value.op.same_as(CALL_TIR)]


def test_a_composite_becomes_one_opaque_kernel_that_records_its_nodes():
    steps = ["bias", "relu", "sum", "relu"]
    lowered = LowerComposites(16)(FusePatterns()(RecordProvenance()(chain("conv2d", steps))))
    (call,) = kernel_calls(lowered)
    kernel = lowered[call.args[0]]
    assert str(kernel.attrs[PATTERN_ATTR]) == "conv2d+bias+relu+sum+relu"
    assert int(kernel.attrs["op_pattern"]) == 8  # opaque: generic fusion adds nothing to it
    assert provenance.span_nodes(call) == list(range(len(steps) + 1))
    assert not any(isinstance(f, relax.Function) and "Composite" in (f.attrs or {})
                   for _, f in lowered.functions_items())


def _run(mod, target, inputs):
    executable = compile_lowered(lowered(mod, target), target)
    vm = relax.VirtualMachine(executable, tvm.cpu())
    out = vm["main"](*[tvm.runtime.tensor(a) for a in inputs])
    return out.numpy()


@pytest.mark.parametrize("anchor", ["conv2d", "depthwise_conv2d", "group_conv2d", "conv1d", "dense", "batch_matmul"])
@pytest.mark.parametrize("steps", [[], ["bias", "bn", "gelu", "sum", "relu"], ["bias", "softplus", "sum", "hardswish"]])
def test_the_fused_kernel_computes_what_the_ops_did(anchor, steps):
    mod = chain(anchor, steps)
    rng = np.random.default_rng(1)
    inputs = [rng.standard_normal([int(d) for d in p.ty.shape]).astype("float32") for p in mod["main"].params]
    target = parse_target("llvm")
    reference = relax.VirtualMachine(tvm.compile(mod, target=target), tvm.cpu())["main"](
        *[tvm.runtime.tensor(a) for a in inputs]).numpy()
    fused = optimize(mod, target)
    assert len(kernel_calls(fused)) == 1
    np.testing.assert_allclose(_run(fused, target, inputs), reference, rtol=1e-4, atol=1e-4 * np.abs(reference).max())


def _residual_3x3(side: int) -> tvm.IRModule:
    """conv 3x3 (16 -> 16 channels, side x side) + bias + relu + residual add."""
    rng = np.random.default_rng(2)

    def const(*shape):
        return relax.const((rng.standard_normal(shape) / 12).astype("float32"))

    def build(bb, x):
        conv = bb.emit(relax.op.nn.conv2d(x, const(16, 16, 3, 3), padding=1))
        relu = bb.emit(relax.op.nn.relu(bb.emit(relax.op.add(conv, const(1, 16, 1, 1)))))
        return bb.emit(relax.op.add(relu, x))

    return module({"x": (1, 16, side, side)}, build)


@pytest.mark.parametrize("side, kernel_prefix", [(28, "winograd4_"), (14, "winograd4_"), (7, "winograd2_"), (5, "conv2d")])
def test_3x3_convs_large_enough_run_as_winograd_and_compute_the_same(side, kernel_prefix):
    mod = _residual_3x3(side)
    target = parse_target("llvm")
    fused = optimize(mod, target)
    (call,) = kernel_calls(fused)
    assert call.args[0].name_hint.startswith(kernel_prefix)
    x = np.random.default_rng(3).standard_normal((1, 16, side, side)).astype("float32")
    (reference,) = run(mod, {"x": x})
    np.testing.assert_allclose(_run(fused, target, [x]), reference, rtol=1e-4, atol=1e-4 * np.abs(reference).max())


@pytest.mark.parametrize("channels", [1, 3])
def test_a_3x3_conv_of_few_input_channels_runs_direct(channels):
    # Winograd saves work in the channel reduction, which a grey or RGB stem barely has; one
    # channel's one-lane transforms also took LLVM minutes to compile at batch 2.
    def build(bb, x):
        weight = relax.const(np.random.default_rng(4).standard_normal((16, channels, 3, 3)).astype("float32"))
        return bb.emit(relax.op.nn.relu(bb.emit(relax.op.nn.conv2d(x, weight, padding=1))))

    (call,) = kernel_calls(optimize(module({"x": (2, channels, 32, 100)}, build), parse_target("llvm")))
    assert call.args[0].name_hint.startswith("conv2d")


def test_the_switch_keeps_the_direct_conv(monkeypatch):
    monkeypatch.setenv(WINOGRAD_SWITCH, "1")
    (call,) = kernel_calls(optimize(_residual_3x3(28), parse_target("llvm")))
    assert call.args[0].name_hint.startswith("conv2d")
