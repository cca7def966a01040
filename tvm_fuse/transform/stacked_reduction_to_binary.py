"""ONNX Sum, Max, Min and Mean as chains of binary ops.

TVM's importer converts an n-input `Sum` (`Max`, `Min`, `Mean`) whose shapes are known into
`sum(stack([broadcast_to(a, s), broadcast_to(b, s), ...]), axis=0)`: every input copied to the
broadcast shape, then stacked into an (n, ...) tensor, then reduced. As adds, `(a + b) + c`, there
are no copies, the broadcasts happen inside the adds, and the fusion table sees the residual adds
it fuses into a conv (`conv + sum`). Inputs of unknown shape already import as binary ops. The
stack also had to go for layout conversion: its layout rule names the new axis `S`, which
crashes `ConvertLayout` on any model that has one.

Run after `FoldConstant` (a broadcast constant is then a constant of the broadcast shape, which
the adds take as it is). Provenance: the last add keeps the sum's binding, the others are named
after the same ONNX node.
"""

from __future__ import annotations

import functools

import tvm
import tvm_ffi
from tvm import relax

from .relax_helpers import is_op, rebind_pass

# The reduction over the stacked axis -> the binary op that chains its terms.
_CHAINS = {
    "relax.sum": relax.op.add,
    "relax.max": relax.op.maximum,
    "relax.min": relax.op.minimum,
    "relax.mean": relax.op.add,  # then divided by the number of terms
}


def StackedReductionToBinary() -> tvm.transform.Pass:
    """`sum(stack(broadcast_to(...)), axis=0)` of an imported ONNX Sum -> `a + b + ...`;
    likewise max, min (`maximum`, `minimum`) and mean (adds, then a division)."""
    return rebind_pass("tvm_fuse.StackedReductionToBinary", _plan)


def _plan(func: relax.Function) -> dict[relax.Var, relax.Expr]:
    """Each stacked reduction in `func` and the chain of binary ops that replaces it."""
    values = dict(relax.analysis.get_var2val(func).items())
    plan: dict[relax.Var, relax.Expr] = {}
    for var, value in values.items():
        terms = _terms(value, values)
        if terms is None or not all(_broadcasts_to(term, var) for term in terms):
            continue
        chained = functools.reduce(_CHAINS[value.op.name], terms)
        if is_op(value, "relax.mean"):
            chained = relax.op.divide(chained, relax.const(len(terms), str(var.ty.dtype)))
        plan[var] = chained
    return plan


def _terms(call, values: dict) -> list[relax.Expr] | None:
    """The tensors that `reduce(stack([broadcast_to(t, s), ...], axis=0), axis=[0])` reduces."""
    if not is_op(call, *_CHAINS) or call.attrs.keepdims or call.attrs.axis is None:
        return None
    if [int(a) for a in call.attrs.axis] != [0] or not isinstance(call.args[0], relax.Var):
        return None
    stack = values.get(call.args[0])
    if not is_op(stack, "relax.stack") or int(stack.attrs.axis) != 0:
        return None
    fields = stack.args[0]
    if not isinstance(fields, relax.Tuple) or len(fields.fields) < 2:
        return None
    terms = []
    for field in fields.fields:
        bound = values.get(field) if isinstance(field, relax.Var) else None
        terms.append(bound.args[0] if is_op(bound, "relax.broadcast_to") else field)
    return terms


def _broadcasts_to(term: relax.Expr, var: relax.Var) -> bool:
    """`term` broadcasts to `var`'s shape without changing it: each dim (aligned from the right)
    is 1 or the same, so the adds give `var`'s type."""
    out, ty = var.ty, term.ty
    if not isinstance(ty, relax.TensorType) or ty.shape is None or out.shape is None or str(ty.dtype) != str(out.dtype):
        return False
    dims, out_dims = list(ty.shape), list(out.shape)
    if len(dims) > len(out_dims):
        return False
    aligned = out_dims[len(out_dims) - len(dims) :]
    return all(_is_one(d) or tvm_ffi.structural_equal(d, o) for d, o in zip(dims, aligned))


def _is_one(dim) -> bool:
    return isinstance(dim, tvm.tirx.IntImm) and int(dim) == 1
