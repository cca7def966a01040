"""FoldConstantLayouts: layout transforms, reshapes and transposes of constants become constants,
computed in numpy, with the values TVM computes for them; what numpy cannot do stays."""

import numpy as np
import pytest
import tvm
from tvm import relax
from tvm.ir.expr import GenericConst

from tvm_fuse.transform.fold_constant_layouts import FoldConstantLayouts

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
    "transpose": lambda: relax.op.permute_dims(relax.const(WEIGHT), [1, 0, 3, 2]),
    "reshape": lambda: relax.op.reshape(relax.const(WEIGHT), [40, 24 * 9]),
}


@pytest.mark.parametrize("op", OPS)
def test_folded_in_numpy_with_tvms_values(op):
    before = _of_constant(OPS[op])
    after = FoldConstantLayouts()(before)
    ops = [b.value.op.name for b in after["main"].body.blocks[0].bindings if isinstance(b.value, relax.Call)]
    assert ops == ["relax.add"], ops  # every op of the constant is gone, the reshape of its result too
    x = {"x": np.zeros(before["main"].params[0].ty.shape.values[0].value, np.float32)}
    # 24 output and 40 input channels pad to whole blocks of 16 with zeros, as TVM pads them.
    np.testing.assert_array_equal(run(after, x)[0], run(before, x)[0])


def test_a_transform_that_is_no_split_and_permute_stays():
    before = _of_constant(lambda: relax.op.layout_transform(relax.const(WEIGHT), lambda o, i, h, k: (o, i, h + k, k)))
    after = FoldConstantLayouts()(before)
    transforms = [b.value for b in after["main"].body.blocks[0].bindings
                  if isinstance(b.value, relax.Call) and b.value.op.name == "relax.layout_transform"]
    assert len(transforms) == 1 and isinstance(transforms[0].args[0], GenericConst)
