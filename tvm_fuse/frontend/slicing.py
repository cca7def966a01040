"""ONNX Slice where TVM's converter is wrong: attributes before opset 10, and starts or ends
that are expressions of the model's symbolic dims or that index a symbolic axis.

TVM slices with `assume_inbound` as soon as one start or end is symbolic, so a negative index
is not counted from the end and one past the end is not clamped: `x[:, -3:n]` of a symbolic `n`
took 17 columns of a 7-column input, and an end of INT64_MAX typed the result with a dim near
2^63. Here each start and end is brought into [0, dim] as ONNX says, on the build's
expressions, before the slice; a step other than a positive constant, or an index whose sign
the build cannot tell, is sliced at run time (`dynamic_strided_slice`), which canonicalizes
them there. A symbolic length into a table of constant size (BERT's position ids sliced to the
sequence) is the one index assumed within its axis, unclamped, so that the result keeps the
length the model's other tensors have; the import records the assumption (`assumed_limits`)
and the run checks the feed against it (`TensorInfo.dim_limits`)."""

from __future__ import annotations

import contextlib
import contextvars

import tvm
from tvm import relax, tirx
from tvm.ir.expr import GenericConst
from tvm.sym import Analyzer

from ..tensor_info import MAX_ELEMENTS
from .attributes import node_name

# (symbolic dim, its largest size, the node) that the slices of an import assumed: `assumed_limits`.
_ASSUMED: contextvars.ContextVar[list | None] = contextvars.ContextVar("assumed_dim_limits", default=None)


@contextlib.contextmanager
def assumed_limits():
    """A list that collects, while the context lasts, each symbolic dim's largest size that a
    slice assumed: its index is `dim + c` into an axis of a constant size the build cannot
    compare it with (torch's `positions[:, :seq]` of a table of 512), which the slice takes as
    within the axis, keeping the result's length `seq`, so that the run checks the feed instead."""
    found: list = []
    token = _ASSUMED.set(found)
    try:
        yield found
    finally:
        _ASSUMED.reset(token)


def slice_(bb, inputs, attrs, opset):
    if opset < 10:  # starts/ends/axes as attributes, which TVM's converter does not read
        starts, ends = list(attrs["starts"]), list(attrs["ends"])
        axes = list(attrs.get("axes", range(len(starts))))
        return relax.op.strided_slice(inputs[0], axes, starts, ends)
    given = list(inputs[1:5])
    starts, ends, axes, steps = [_index_list(x) for x in given + [None] * (4 - len(given))]
    data = inputs[0]
    ty = getattr(data, "ty", None)
    if not isinstance(ty, relax.TensorType) or ty.shape is None or starts is None or ends is None:
        return None  # a form TVM's converter reads rightly or refuses
    rank = len(ty.shape)
    axes = [a + rank if a < 0 else a for a in axes] if axes is not None else list(range(len(starts)))
    steps = steps if steps is not None else [1] * len(starts)
    if any(not isinstance(a, int) for a in axes):
        return None
    if all(isinstance(i, int) for i in starts + ends) and all(isinstance(ty.shape[a], tirx.IntImm) for a in axes):
        return None  # constant indices into static axes: TVM's converter clamps them rightly
    if any(_is_tensor(i) for i in starts + ends + steps):
        return _at_run_time(bb, data, axes, starts, ends, steps)
    begin, end = [], []
    with dims_in_range([*ty.shape, *starts, *ends]) as analyzer:
        for axis, start, stop, step in zip(axes, starts, ends, steps):
            dim = ty.shape[axis]
            first, last = _within(analyzer, start, dim), _within(analyzer, stop, dim)
            if not isinstance(step, int) or step <= 0 or first is None or last is None:
                return _at_run_time(bb, data, axes, starts, ends, steps)
            first, last = (_assumed(index, dim, attrs) for index in (first, last))
            begin.append(first)
            end.append(last if analyzer.can_prove(last >= first) else tirx.max(last, first))  # else: empty
    return relax.op.strided_slice(data, axes, [relax.prim_value(b) for b in begin],
                                  [relax.prim_value(e) for e in end], steps, assume_inbound=True)


def _assumed(index, dim, attrs):
    """`index`, clamped to `dim` as `_within` left it, or unclamped where it is a symbolic dim
    plus a constant and `dim` a constant: the limit it assumes goes to `assumed_limits`."""
    if not isinstance(index, tirx.Min) or not isinstance(dim, tirx.IntImm) or _ASSUMED.get() is None:
        return index
    unclamped = index.a
    var, offset = (unclamped, 0) if isinstance(unclamped, tirx.Var) else (None, 0)
    if isinstance(unclamped, tirx.Add) and isinstance(unclamped.a, tirx.Var) and isinstance(unclamped.b, tirx.IntImm):
        var, offset = unclamped.a, int(unclamped.b)
    if var is None:
        return index
    _ASSUMED.get().append((var.name, int(dim) - offset, node_name(attrs)))
    return unclamped


def _index_list(value) -> list | None:
    """A Slice parameter as a list of ints, symbolic expressions and, for a 1-D integer tensor
    computed at run time, its elements as 1-element tensors; None if absent or of unknown length."""
    if value is None:
        return None
    ty = getattr(value, "ty", None)
    if (isinstance(value, relax.Var) and isinstance(ty, relax.TensorType) and ty.shape is not None
            and len(ty.shape) == 1 and isinstance(ty.shape[0], tirx.IntImm) and str(ty.dtype).startswith("int")):
        return [relax.op.strided_slice(value, [0], [i], [i + 1]) for i in range(int(ty.shape[0]))]
    if isinstance(value, GenericConst):
        array = value.value.numpy()
        return [int(i) for i in array.reshape(-1)] if array.ndim == 1 else None
    if isinstance(value, relax.ShapeExpr):
        return [int(i) if isinstance(i, tirx.IntImm) else i for i in value.values]
    if tvm.ir.is_prim_expr(value):
        return [int(value) if isinstance(value, tirx.IntImm) else value]
    return None


@contextlib.contextmanager
def dims_in_range(exprs):
    """An analyzer that knows every symbolic dim in `exprs` lies in [1, MAX_ELEMENTS] (a run
    feeds no empty tensors, and none past int32's indices)."""
    analyzer = Analyzer()
    with contextlib.ExitStack() as scopes:
        for var in {v for e in exprs if tvm.ir.is_prim_expr(e) for v in tirx.analysis.undefined_vars(e)}:
            scopes.enter_context(analyzer.constraint_scope(tirx.all(var >= 1, var <= MAX_ELEMENTS)))
        yield analyzer


def _within(analyzer: Analyzer, index, dim):
    """ONNX's index into an axis of `dim` for a positive step: counted from the end if negative,
    then clamped to [0, dim]; None where the sign of a symbolic index is unknown."""
    dim = tirx.IntImm("int64", dim) if isinstance(dim, int) else dim
    if isinstance(index, int):
        index = tirx.IntImm("int64", index)
    index = index.astype("int64") if str(index.ty) != "int64" else index
    if analyzer.can_prove(index >= 0):
        return index if analyzer.can_prove(index <= dim) else dim if analyzer.can_prove(index >= dim) \
            else tirx.min(index, dim)
    if analyzer.can_prove(index < 0):
        index = analyzer.simplify(index + dim)
        return index if analyzer.can_prove(index >= 0) else tirx.IntImm("int64", 0) if analyzer.can_prove(index <= 0) \
            else tirx.max(index, tirx.IntImm("int64", 0))
    return None


def _at_run_time(bb, data, axes, starts, ends, steps):
    """The slice with its indices as int64 tensors, canonicalized when it runs; the axes it
    does not slice keep their dims, each sliced one a new symbolic dim."""
    shape = list(data.ty.shape)
    begin, end, stride = [0] * len(shape), list(shape), [1] * len(shape)
    for axis, start, stop, step in zip(axes, starts, ends, steps):
        begin[axis], end[axis], stride[axis] = start, stop, step
    tensors = [bb.normalize(relax.op.concat([_as_tensor(i) for i in values])) for values in (begin, end, stride)]
    sliced = bb.emit(relax.op.dynamic_strided_slice(data, *tensors))
    dims = [tirx.Var(f"sliced{axis}", "int64") if axis in axes else dim for axis, dim in enumerate(shape)]
    return bb.match_cast(sliced, relax.TensorType(dims, data.ty.dtype))


def _is_tensor(index) -> bool:
    return not isinstance(index, int) and not tvm.ir.is_prim_expr(index)


def _as_tensor(value) -> relax.Expr:
    """An index (int, symbolic expression or 1-element tensor) as a 1-element int64 tensor."""
    if _is_tensor(value):
        return relax.op.astype(value, "int64")
    value = tirx.IntImm("int64", value) if isinstance(value, int) else value
    return relax.op.shape_to_tensor(relax.ShapeExpr([value if str(value.ty) == "int64" else value.astype("int64")]))
