"""Dense layers in one form: `R.matmul(x, W)` with a constant `W` of shape (K, N), then
`R.add(y, b)` with a constant bias `b` of shape (N,).

ONNX Gemm (`alpha * A @ op(B) + beta * C`) and MatMul + Add reach Relax in several spellings.
After `FoldConstant`, a `transB` transpose and `beta * C` are already constants; what remains is
the importer's `x * alpha` on the activation, the bias-first `add(b, y)` of an ONNX `Add(b, y)`
(what PyTorch exports for `nn.Linear` on a 3-D input), and per-column biases of shape (1, N), (1,)
or (). This pass folds `alpha` into `W` and reorders and reshapes the bias, so the fusion
patterns and kernels see one form, whatever the input rank. A bias that varies along rows, such
as a full (M, N) `C`, keeps its shape. Only matmuls by a constant 2-D weight are touched; run this
pass after `FoldConstant`.

Provenance: the matmul and the add keep their bindings, so no node changes its name; the alpha
multiply that goes away is the Gemm's own.
"""

from __future__ import annotations

import numpy as np
import tvm
from tvm import relax

from .. import provenance
from .relax_helpers import dtype, is_op, rebind_pass, same_type, scalar_value


def CanonicalizeDense() -> tvm.transform.Pass:
    """Gemm / MatMul + Add by constants -> `matmul(x, W[K, N])` and `add(y, b[N])`."""
    return rebind_pass("tvm_fuse.CanonicalizeDense", _plan)


def _plan(func: relax.Function) -> dict[relax.Var, relax.Expr]:
    """The bindings to rewrite in `func` and their new values."""
    values = dict(relax.analysis.get_var2val(func).items())
    plan: dict[relax.Var, relax.Expr] = {}
    for var, value in values.items():
        new = _folded_alpha(var, value, values)
        if new is None:
            new = _canonical_bias(var, value, values)
        if new is not None:
            plan[var] = new
    return plan


def _folded_alpha(var: relax.Var, call, values: dict) -> relax.Call | None:
    """`matmul(x * alpha, W)` -> `matmul(x, W * alpha)`, for a Gemm's constant scalar alpha:
    the multiply must come from the matmul's own ONNX node. A Mul node of the model's before a
    MatMul stays (the 0.5 that ends an erf-GELU, say): folding it would drop that node."""
    if not _is_dense(call) or not isinstance(call.args[0], relax.Var):
        return None
    data, weight = call.args
    scaled = values.get(data)
    node = provenance.node_index(var)
    if not is_op(scaled, "relax.multiply") or node is None or provenance.node_index(data) != node:
        return None
    for x, alpha in (scaled.args, reversed(scaled.args)):
        if scalar_value(alpha) is not None and same_type(x, data):
            new_weight = (weight.value.numpy() * alpha.value.numpy().reshape(())).astype(dtype(weight))
            return relax.Call(call.op, [x, relax.const(new_weight)], call.attrs)
    return None


def _canonical_bias(var: relax.Var, call, values: dict) -> relax.Call | None:
    """`add(b, y)` -> `add(y, b)`, and a per-column `b` reshaped to (N,), where `y` is a dense
    layer's output and `b` a constant that does not broadcast `y` to a larger shape."""
    if not is_op(call, "relax.add"):
        return None
    lhs, rhs = call.args
    swapped = isinstance(lhs, tvm.ir.GenericConst)
    y, bias = (rhs, lhs) if swapped else (lhs, rhs)
    if not isinstance(bias, tvm.ir.GenericConst) or not isinstance(y, relax.Var):
        return None
    if not _is_dense(values.get(y)) or not same_type(y, var):
        return None
    array, columns = bias.value.numpy(), int(values[y].args[1].ty.shape[1])
    per_column = all(d == 1 for d in array.shape[:-1]) and array.size in (1, columns)
    if per_column and array.shape != (columns,):
        bias = relax.const(np.broadcast_to(array.reshape(-1), (columns,)).copy())
    elif not swapped:
        return None
    return relax.Call(call.op, [y, bias], call.attrs)


def _is_dense(call) -> bool:
    """A matmul by a constant 2-D weight."""
    return (
        is_op(call, "relax.matmul")
        and isinstance(call.args[1], tvm.ir.GenericConst)
        and call.args[1].ty.ndim == 2
        and call.args[0].ty.ndim >= 1
    )
