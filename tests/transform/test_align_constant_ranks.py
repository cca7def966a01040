"""A lower-rank constant operand takes its tensor's rank, so layouts can be converted through it."""

from __future__ import annotations

import numpy as np
import tvm
from tvm import relax

from tvm_fuse.transform.align_constant_ranks import AlignConstantRanks
from tvm_fuse.transform.blocked_layout import BlockedLayout


def _conv_then_scale(scale_shape):
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, 16, 8, 8), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            c = bb.emit(relax.op.nn.conv2d(x, relax.const(np.ones((16, 16, 1, 1), "float32"))))
            joined = bb.emit(relax.op.concat([c, c], axis=1))  # a DenseNet block
            s = bb.emit(relax.op.multiply(joined, relax.const(np.arange(32, dtype="float32").reshape(scale_shape))))
            r = bb.emit(relax.op.nn.relu(s))
            out = bb.emit_output(bb.emit(relax.op.nn.conv2d(r, relax.const(np.ones((16, 32, 1, 1), "float32")))))
        bb.emit_func_output(out)
    return bb.get()


def _transforms(mod):
    return sum(1 for b in mod["main"].body.blocks[0].bindings
               if isinstance(b.value, relax.Call) and b.value.op.same_as(tvm.ir.Op.get("relax.layout_transform")))


def test_a_rank_3_scale_after_a_concat_becomes_rank_4_and_stays_in_the_blocked_layout():
    aligned = AlignConstantRanks()(_conv_then_scale((32, 1, 1)))
    (scale,) = [b.value.args[1] for b in aligned["main"].body.blocks[0].bindings
                if isinstance(b.value, relax.Call) and b.value.op.name == "relax.multiply"]
    assert tuple(int(d) for d in scale.ty.shape) == (1, 32, 1, 1)
    folded = relax.transform.FoldConstant()(BlockedLayout(16)(aligned))
    assert _transforms(folded) == 2  # in and out of the chain only
    unaligned = relax.transform.FoldConstant()(BlockedLayout(16)(_conv_then_scale((32, 1, 1))))
    assert _transforms(unaligned) > 2


def _conv_then_one_value(shape):
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, 16, 8, 8), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            c = bb.emit(relax.op.nn.conv2d(x, relax.const(np.ones((16, 16, 1, 1), "float32"))))
            s = bb.emit(relax.op.multiply(relax.const(np.full(shape, 1.5, "float32")), c))
            out = bb.emit_output(bb.emit(relax.op.nn.conv2d(s, relax.const(np.ones((16, 16, 1, 1), "float32")))))
        bb.emit_func_output(out)
    return bb.get()


def test_a_one_element_constant_becomes_a_scalar_and_the_chain_stays_blocked():
    """PP-LCNetV3 scales each conv by a [1]; as [1, 1, 1, 1] its channel would not block."""
    aligned = AlignConstantRanks()(_conv_then_one_value((1,)))
    (scale,) = [b.value.args[0] for b in aligned["main"].body.blocks[0].bindings
                if isinstance(b.value, relax.Call) and b.value.op.name == "relax.multiply"]
    assert scale.ty.ndim == 0
    assert _transforms(relax.transform.FoldConstant()(BlockedLayout(16)(aligned))) == 2
