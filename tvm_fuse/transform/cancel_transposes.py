"""Cancel a transpose undone after elementwise ops: `permute(f(permute(x, p)), q)`, where q
undoes p and f is elementwise with scalar or constant operands (a constant laid out as x is),
is `f(x)`.

A model that runs its 1-D convs channels-first between dense layers writes this pattern
(wav2vec2's feature encoder: each conv, as a product channels-last (`Conv1dAsDense`), then a
transpose to [N, C, T], a GELU, and the next conv's transpose back). TVM fuses both transposes
with the GELU but schedules them as two copies, the first of them strided.

An intermediate value something else reads stays as it is (its rewrite would compute it twice).
"""

from __future__ import annotations

import numpy as np
import tvm
from tvm import relax

from ..compute.epilogue import ELEMENTWISE
from .relax_helpers import permutation, rebind_pass, scalar_operand, use_counts


def CancelTransposes() -> tvm.transform.Pass:
    return rebind_pass("tvm_fuse.CancelTransposes", _plan)


def _plan(func: relax.Function) -> dict[relax.Var, relax.Expr]:
    values = relax.analysis.get_var2val(func)
    uses = use_counts(func)
    plan = {}
    for var, value in values.items():
        axes = permutation(value)
        if axes is None or not isinstance(value.args[0], relax.Var) or uses[value.args[0]] != 1:
            continue
        rewritten = {}
        if _undo(value.args[0], axes, values, uses, rewritten):
            plan.update(rewritten)  # each op on the untransposed tensors, its own binding
            plan[var] = value.args[0]
    return plan


def _undo(var: relax.Var, axes: list[int], values: dict, uses, rewritten: dict) -> bool:
    """Whether `var` is computed elementwise from transposes that `axes` undoes (and constants);
    if so, `rewritten` holds each elementwise op's binding over their inputs instead."""
    value = values.get(var)
    if not (isinstance(value, relax.Call) and isinstance(value.op, tvm.ir.Op) and value.op.name in ELEMENTWISE):
        return False
    args = []
    for arg in value.args:
        inner = permutation(values.get(arg)) if isinstance(arg, relax.Var) else None
        if scalar_operand(arg):
            args.append(arg)
        elif isinstance(arg, tvm.ir.GenericConst) and (constant := _untransposed(arg, axes, value)) is not None:
            args.append(constant)  # as the untransposed tensor reads it
        elif inner is not None and all(inner[axes[i]] == i for i in range(len(axes))):
            args.append(values[arg].args[0])  # the transpose may have other readers: it stays for them
        elif isinstance(arg, relax.Var) and uses[arg] == 1 and _undo(arg, axes, values, uses, rewritten):
            args.append(arg)
        else:
            return False
    rewritten[var] = relax.Call(value.op, args, value.attrs, value.ty_args)
    return True


def _untransposed(constant: tvm.ir.GenericConst, axes: list[int], value: relax.Call):
    """`constant`, broadcast against `value`'s transposed tensors, laid out as their sources
    are (`axes` restores them): a TensorFlow export's per-channel bias or batch-norm constant
    of [C] on NHWC becomes [1, C, 1, 1] on NCHW. None if its rank is above the tensors'."""
    array = constant.value.numpy()
    rank = value.ty.ndim
    if array.ndim > rank:
        return None
    return relax.const(np.ascontiguousarray(np.transpose(array.reshape((1,) * (rank - array.ndim) + array.shape), axes)))

