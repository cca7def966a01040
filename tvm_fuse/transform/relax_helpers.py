"""Shared machinery of our Relax passes (`mutate_functions`), and of the canonicalization
passes in particular: a pass plans new values for some bindings
(`plan(func) -> {var: new value}`), and `Rebinder` gives each planned binding its new value
while keeping its variable, so names and ONNX nodes (`provenance`) survive. TVM's
`dpl.rewrite_call` would rename the final binding `gv` and nested calls `lv`."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import tvm
import tvm_ffi
from tvm import relax
from tvm.relax.expr_functor import PyExprMutator, mutator

from .. import provenance

Plan = Callable[[relax.Function], dict]


def static_shape(expr) -> list[int] | None:
    """The dims of `expr`'s tensor type, or None unless it is a tensor of constant shape."""
    ty = getattr(expr, "ty", None)
    if not isinstance(ty, relax.TensorType) or not isinstance(ty.shape, relax.ShapeExpr):
        return None
    dims = ty.shape.values
    return [int(d) for d in dims] if all(isinstance(d, tvm.tirx.IntImm) for d in dims) else None


def mutate_functions(mod: tvm.IRModule, mutator: PyExprMutator,
                     rewrite: Callable[[relax.Function], relax.Function | None]) -> tvm.IRModule:
    """`mod` with each Relax function replaced by `rewrite(func)` (None: left as it is), as
    the block builder of `mutator` (made for `mod`) builds it."""
    for gvar, func in mod.functions_items():
        if isinstance(func, relax.Function):
            rewritten = rewrite(func)
            if rewritten is not None:
                mutator.builder_.update_func(gvar, rewritten)
    return mutator.builder_.get()


def rebind(mutator: PyExprMutator, binding: relax.VarBinding, value: relax.Expr) -> None:
    """Emit `value` in place of `binding`, under its name, as the `mutator` visits it."""
    builder = mutator.builder_
    emit = builder.emit if isinstance(binding.var, relax.DataflowVar) else builder.emit_output
    mutator.set_var_remap(binding.var, emit(value, binding.var.name))


def rebind_pass(name: str, plan: Plan) -> tvm.transform.Pass:
    """A module pass that rewrites every Relax function by its `plan`."""

    def rewrite(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        rebinder = Rebinder(mod)

        def by_plan(func: relax.Function) -> relax.Function | None:
            planned = plan(func)
            return rebinder.rewrite(func, planned) if planned else None

        return mutate_functions(mod, rebinder, by_plan)

    return tvm.transform.module_pass(rewrite, opt_level=0, name=name)


@mutator
class Rebinder(PyExprMutator):
    """Gives planned bindings their new values and keeps their variables (a value of another
    shape, their names); calls nested in a new value are bound first, named after the binding's
    node; bindings nothing reads are dropped."""

    def __init__(self, mod: tvm.IRModule):
        super().__init__(mod)
        self._plan: dict[relax.Var, relax.Expr] = {}

    def rewrite(self, func: relax.Function, plan: dict[relax.Var, relax.Expr]) -> relax.Function:
        self._plan = plan
        return relax.analysis.remove_all_unused(self.visit_expr(func))

    def visit_var_binding_(self, binding: relax.VarBinding) -> None:
        value = self._plan.get(binding.var)
        if value is None:
            return super().visit_var_binding_(binding)
        node = provenance.node_index(binding.var)
        value = self.builder_.normalize(self._bind_nested(value, provenance.tag(node) if node is not None else ""))
        if tvm_ffi.structural_equal(value.ty, binding.var.ty):
            self.builder_.emit_normalized(relax.VarBinding(binding.var, value))
        else:  # a value of another shape: a new variable of the same name (and node) for every reader
            self.set_var_remap(binding.var, self.builder_.emit(value, binding.var.name))

    def _bind_nested(self, expr: relax.Expr, name: str) -> relax.Expr:
        if not isinstance(expr, relax.Call):
            return self.visit_expr(expr)
        args = [self._bind_nested(arg, name) for arg in expr.args]
        args = [self.builder_.emit(arg, name) if isinstance(arg, relax.Call) else arg for arg in args]
        return relax.Call(expr.op, args, expr.attrs, expr.ty_args, expr.span)  # a span of nodes, if planned


def is_op(expr, *names: str) -> bool:
    """`expr` calls one of the ops `names` (Relax's, or TIR's: `tirx.reinterpret`)."""
    return isinstance(expr, relax.Call) and isinstance(expr.op, tvm.ir.Op) and expr.op.name in names


def permutation(value) -> list[int] | None:
    """The axes of a `permute_dims` call (its default, all reversed, spelled out); None for
    any other value."""
    if not is_op(value, "relax.permute_dims"):
        return None
    if value.attrs.axes is not None:
        return [int(a) for a in value.attrs.axes]
    return list(range(value.args[0].ty.ndim))[::-1]


def scalar_operand(arg) -> bool:
    """A 0-d constant or a value that is no tensor (clip bounds): the same in every layout."""
    if isinstance(arg, tvm.ir.GenericConst):
        return arg.value.numpy().ndim == 0
    return not isinstance(arg, relax.Var) and not isinstance(getattr(arg, "ty", None), relax.TensorType)


def scalar_value(expr) -> float | None:
    """The value of a constant of one element (of any rank), else None."""
    if not isinstance(expr, tvm.ir.GenericConst) or expr.value.numpy().size != 1:
        return None
    return float(expr.value.numpy().reshape(()))


def dtype(expr: relax.Expr) -> str:
    return str(expr.ty.dtype)


def same_type(a: relax.Expr, b: relax.Expr) -> bool:
    """Both tensors of the same known shape and dtype."""
    return (
        isinstance(a.ty, relax.TensorType)
        and isinstance(b.ty, relax.TensorType)
        and a.ty.shape is not None
        and b.ty.shape is not None
        and dtype(a) == dtype(b)
        and tvm_ffi.structural_equal(a.ty.shape, b.ty.shape)
    )


def use_counts(func: relax.Function) -> Counter:
    """How many times each variable is read in `func` (bindings, and the returned value)."""
    counts: Counter = Counter()
    relax.analysis.post_order_visit(func, lambda e: counts.update([e]) if isinstance(e, relax.Var) else None)
    return counts


def readers(func: relax.Function) -> dict[relax.Var, list[relax.VarBinding | None]]:
    """Each variable -> the bindings reading it, once per read (None: `func` returns it)."""
    found: dict[relax.Var, list[relax.VarBinding | None]] = {}

    def note(expr: relax.Expr, reader: relax.VarBinding | None) -> None:
        relax.analysis.post_order_visit(
            expr, lambda e: found.setdefault(e, []).append(reader) if isinstance(e, relax.Var) else None)

    for block in func.body.blocks:
        for binding in block.bindings:
            note(binding.value, binding)
    note(func.body.body, None)
    return found


def read_only_by(reads: dict, var: relax.Expr, reader: relax.Var) -> bool:
    """Whether `var` is read once, by the binding of `reader` (`reads`: `readers(func)`)."""
    return [getattr(r, "var", None) for r in reads.get(var, [])] == [reader]


def blocked_from_nchw(value: relax.Expr | None) -> relax.Expr | None:
    """x if `value` is layout_transform(x) from NCHW to NCHW{c}c without padding, else None."""
    if not is_op(value, "relax.layout_transform") or value.attrs.pad_value is not None:
        return None
    source = value.args[0]
    if source.ty.ndim != 4 or value.ty.ndim != 5:
        return None
    channels = int(value.ty.shape[-1])
    channel = 2 * channels + 1  # a probe whose block and lane differ from every other index
    blocked = [int(i) for i in value.attrs.index_map.map_indices([0, channel, 5, 7])]
    return source if blocked == [0, channel // channels, 5, 7, channel % channels] else None


def nchw_from_blocked(value: relax.Expr | None) -> relax.Expr | None:
    """x if `value` is layout_transform(x) from NCHW{c}c to NCHW without padding, else None."""
    if not is_op(value, "relax.layout_transform") or value.attrs.pad_value is not None:
        return None
    source = value.args[0]
    if source.ty.ndim != 5 or value.ty.ndim != 4:
        return None
    channels = int(source.ty.shape[-1])
    plain = [int(i) for i in value.attrs.index_map.map_indices([0, 2, 5, 7, 1])]
    return source if plain == [0, 2 * channels + 1, 5, 7] else None
