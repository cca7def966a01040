"""FoldConstants: layout transforms, reshapes and transposes of constants become constants,
computed in numpy, with the values TVM computes for them; what numpy cannot do TVM's FoldConstant
folds; a variable bound to a constant is read as the constant. The module is the one TVM's
FoldConstant makes."""

import numpy as np
import pytest
import tvm
import tvm_ffi
from tvm import relax
from tvm.ir.expr import GenericConst

from tvm_fuse.transform.fold_constants import FoldConstants

from .relax_modules import module, run

WEIGHT = np.random.default_rng(0).standard_normal((24, 40, 3, 3)).astype(np.float32)


def _of_constant(op) -> tvm.IRModule:
    """main(x) = x + op(WEIGHT) flattened: the folded constant is read at run time."""
    elements = int(np.prod([int(d) for d in relax.BlockBuilder().normalize(op()).ty.shape.values]))
    return module({"x": (elements,)}, lambda bb, x: bb.emit(relax.op.add(x, relax.op.reshape(bb.emit(op()), [-1]))))


OPS = {
    "blocked weight": lambda: relax.op.layout_transform(
        relax.const(WEIGHT), lambda o, i, h, k: (o // 16, i // 16, h, k, i % 16, o % 16)),
    "blocked bias": lambda: relax.op.layout_transform(
        relax.const(WEIGHT.reshape(1, -1, 1, 1)), lambda n, c, h, k: (n, c // 16, h, k, c % 16)),
    "image channels block": lambda: relax.op.layout_transform(
        relax.const(WEIGHT), lambda o, i, h, k: (o // 8, i // 40, h, k, i % 40, o % 8)),
    "depthwise weight": lambda: relax.op.layout_transform(
        relax.const(WEIGHT[:, :1]), lambda o, i, h, k: (o // 16, i, h, k, tvm.tirx.IntImm("int64", 0), o % 16)),
    "transpose": lambda: relax.op.permute_dims(relax.const(WEIGHT), [1, 0, 3, 2]),
    "reshape": lambda: relax.op.reshape(relax.const(WEIGHT), [40, 24 * 9]),
}


@pytest.mark.parametrize("op", OPS)
def test_folded_in_numpy_with_tvms_values(op, monkeypatch):
    before = _of_constant(OPS[op])
    monkeypatch.setattr(relax.transform, "FoldConstant", None)  # numpy's work alone
    after = FoldConstants()(before)
    ops = [b.value.op.name for b in after["main"].body.blocks[0].bindings if isinstance(b.value, relax.Call)]
    assert ops == ["relax.add"], ops  # every op of the constant is gone, the reshape of its result too
    x = {"x": np.zeros(before["main"].params[0].ty.shape.values[0].value, np.float32)}
    # 24 output and 40 input channels pad to whole blocks of 16 with zeros, as TVM pads them.
    np.testing.assert_array_equal(run(after, x)[0], run(before, x)[0])


def _ops(mod: tvm.IRModule) -> list[str]:
    return [b.value.op.name for b in mod["main"].body.blocks[0].bindings if isinstance(b.value, relax.Call)]


def test_arithmetic_of_constants_is_folded_by_tvm():
    before = _of_constant(lambda: relax.op.multiply(relax.const(WEIGHT), relax.const(np.float32(2))))
    after = FoldConstants()(before)
    assert _ops(after) == ["relax.add"]
    assert tvm_ffi.structural_equal(after, relax.transform.FoldConstant()(before))


def _conv_of_bound_constants(bb, x):
    """A conv whose weight, and an add whose operand, are variables bound to constants."""
    weight = bb.emit(relax.const(WEIGHT[:, :8]))
    conv = bb.emit(relax.op.nn.conv2d(x, weight))
    return relax.op.add(conv, bb.emit(relax.const(np.ones((1, 24, 1, 1), np.float32))))


@pytest.mark.parametrize("build", [_conv_of_bound_constants, lambda bb, x: relax.op.nn.relu(x)],
                         ids=["bound constants", "nothing to fold"])
def test_the_module_is_tvms(build):
    before = module({"x": (1, 8, 10, 10)}, build)
    after = FoldConstants()(before)
    assert tvm_ffi.structural_equal(after, relax.transform.FoldConstant()(before))
    assert not any(isinstance(b.value, GenericConst) for b in after["main"].body.blocks[0].bindings)
