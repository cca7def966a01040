"""Give a constant operand of a binary elementwise op the rank of the other operand.

ONNX broadcasts `x[N, C, H, W] * s[C, 1, 1]`; TVM's layout conversion cannot carry a rank-3
constant into a blocked NCHW{c}c layout, so it would convert back to NCHW around the op (as
around every batch-norm-as-Mul/Add after DenseNet's concats). Reshaped to [1, C, 1, 1], the
constant is converted with the tensor, at build time. A one-element constant becomes a scalar
instead (PP-LCNetV3 scales every conv output by a [1]), which holds in any layout.
"""

from __future__ import annotations

import tvm
from tvm import relax

from .relax_helpers import rebind_pass

_BINARY = ("relax.add", "relax.subtract", "relax.multiply", "relax.divide", "relax.maximum", "relax.minimum")


def AlignConstantRanks() -> tvm.transform.Pass:
    return rebind_pass("tvm_fuse.AlignConstantRanks", _plan)


def _plan(func: relax.Function) -> dict[relax.Var, relax.Expr]:
    plan = {}
    for var, value in relax.analysis.get_var2val(func).items():
        if not (isinstance(value, relax.Call) and isinstance(value.op, tvm.ir.Op) and value.op.name in _BINARY):
            continue
        ranks = [a.ty.ndim for a in value.args]
        args = list(value.args)
        for i, arg in enumerate(args):
            other = ranks[1 - i]
            if not isinstance(arg, tvm.ir.GenericConst) or not 0 < ranks[i] <= other:
                continue
            array = arg.value.numpy()
            shape = () if array.size == 1 else (1,) * (other - array.ndim) + array.shape
            if shape != array.shape:
                args[i] = relax.const(array.reshape(shape), str(arg.ty.dtype))
        if any(not a.same_as(b) for a, b in zip(args, value.args)):
            plan[var] = relax.Call(value.op, args, value.attrs, value.ty_args)
    return plan
