"""Give layer norms and softmaxes over the last axis our vectorized kernels
(`compute.rowwise`) instead of TVM's, which reduce one element at a time: fp32 softmaxes of
any width (a sequence length too), layer norms of a static width (with a scale and an
offset). Any other stays TVM's.

Attention's scaling and mask before its softmax, `softmax(scores * c + mask)` (either part
alone too), join the softmax's kernel when nothing else reads them: the scores are read once,
where the three kernels TVM would make write and read them twice more. So do the adds before a
layer norm (a residual add; a BERT embedding's sum of word, position and token-type rows) and
the gathers they add up: an embedding layer is one kernel, gathers, sum and norm."""

from __future__ import annotations

import tvm
from tvm import relax, te, topi
from tvm.ir.expr import GenericConst

from .. import provenance
from ..compute.rowwise import layer_norm_rows, softmax_rows
from ..ir_names import KERNEL_ATTR, OP_PATTERN_ATTR, OPAQUE
from .relax_helpers import is_op, mutate_functions, scalar_value, use_counts


@relax.expr_functor.mutator
class _RowwiseLowerer(relax.PyExprMutator):
    def __init__(self, mod: tvm.IRModule, lanes: int):
        super().__init__(mod)
        self.lanes = lanes
        self.values: dict[relax.Var, relax.Expr] = {}
        self.uses = None
        self.absorbed: set[relax.Var] = set()  # a softmax's prologue, computed in its kernel

    def lower(self, func: relax.Function) -> relax.Function:
        self.values = {b.var: b.value for block in func.body.blocks for b in block.bindings}
        self.uses = use_counts(func)
        self.absorbed = set()
        for var, value in self.values.items():
            if is_op(value, "relax.nn.softmax") and _rows_lowerable(value.args[0], [int(value.attrs.axis)]):
                self.absorbed.update(self._prologue(value.args[0])[1])
            elif is_op(value, "relax.nn.layer_norm") and _layer_norm_lowerable(value, self.lanes):
                self.absorbed.update(self._sum_prologue(value.args[0])[2])
        return self.visit_expr(func)

    def _sum_prologue(self, data: relax.Expr):
        """(tree, leaves, bindings) of `data` as a tree of adds and gathers (`take` along axis 0)
        that only it reads: `tree` as nested tuples ("add", a, b), ("take", table, ids, mode),
        ("leaf", index into `leaves`). Just ("leaf", 0) when `data` is not such an add."""
        leaves, steps = [], []

        def tree(expr, top=False):
            value = self.values.get(expr)
            if (top or self.uses[expr] == 1) and _known_fp32(expr):
                if is_op(value, "relax.add") and all(_known_fp32(a) for a in value.args):
                    steps.append(expr)
                    return ("add", tree(value.args[0]), tree(value.args[1]))
                if is_op(value, "relax.take") and not top and value.attrs.axis is not None \
                        and int(value.attrs.axis) == 0:
                    steps.append(expr)
                    return ("take", tree(value.args[0]), ids(value.args[1]), str(value.attrs.mode))
            return leaf(expr)

        def leaf(expr):
            leaves.append(expr)
            return ("leaf", len(leaves) - 1)

        def ids(expr):
            """ONNX Gather's indices as the importer writes them, negative ones counted from
            the end: `where(less(i, 0), add(i, n), i)`, absorbed when only the gather reads it."""
            value = self.values.get(expr)
            if is_op(value, "relax.where") and self.uses[expr] == 1:
                condition, wrapped = (self.values.get(a) for a in value.args[:2])
                count = scalar_value(wrapped.args[1]) if is_op(wrapped, "relax.add") else None
                if is_op(condition, "relax.less") and scalar_value(condition.args[1]) == 0 and count is not None \
                        and condition.args[0].same_as(value.args[2]) and wrapped.args[0].same_as(value.args[2]) \
                        and all(self.uses[a] == 1 for a in value.args[:2]):
                    steps.extend([expr, *value.args[:2]])
                    return ("wrapped", leaf(value.args[2]), int(count))
            return leaf(expr)

        return tree(data, top=self.uses[data] == 1), leaves, steps

    def _prologue(self, data: relax.Expr):
        """(scores, scale or None, mask or None) of `data = scores * scale + mask`, and the
        bindings of those steps that only the softmax reads."""
        steps, scale, mask = [], None, None
        value = self.values.get(data)
        if is_op(value, "relax.add") and self.uses[data] == 1 and _known_fp32(value.args[1]):
            steps.append(data)
            data, mask = value.args
            value = self.values.get(data)
        if is_op(value, "relax.multiply") and self.uses[data] == 1 and isinstance(value.args[1], GenericConst) \
                and value.args[1].ty.ndim == 0:
            steps.append(data)
            data, scale = value.args
        return (data, scale, mask), steps

    def visit_var_binding_(self, binding: relax.VarBinding) -> None:
        if binding.var in self.absorbed:
            return None
        call = binding.value
        op = call.op.name if isinstance(call, relax.Call) and isinstance(call.op, tvm.ir.Op) else None
        if op == "relax.nn.layer_norm" and _layer_norm_lowerable(call, self.lanes):
            prologue, leaves, steps = self._sum_prologue(call.args[0])
            epsilon = float(call.attrs.epsilon)
            kernel = self.builder_.call_te(
                lambda gamma, beta, *xs: layer_norm_rows(_expanded(prologue, xs), gamma, beta, epsilon, self.lanes),
                *(self.visit_expr(e) for e in (*call.args[1:], *leaves)), primfunc_name_hint="layer_norm",
                primfunc_attrs={KERNEL_ATTR: "nn.layer_norm", OP_PATTERN_ATTR: OPAQUE})
            own = provenance.span_nodes(call) or [provenance.node_index(binding.var)]  # a recomposed norm's nodes
            kernel = provenance.recorded(kernel, dict.fromkeys([*own, *map(provenance.node_index, steps)]))
        elif op == "relax.nn.softmax" and _rows_lowerable(call.args[0], [int(call.attrs.axis)]):
            (scores, scale, mask), steps = self._prologue(call.args[0])
            operands = [self.visit_expr(e) for e in (scores, mask) if e is not None]
            kernel = self.builder_.call_te(
                lambda x, *masks: softmax_rows(_scaled_masked(x, scale, masks), self.lanes), *operands,
                primfunc_name_hint="softmax", primfunc_attrs={KERNEL_ATTR: "nn.softmax", OP_PATTERN_ATTR: OPAQUE})
            kernel = provenance.recorded(kernel, map(provenance.node_index, [binding.var, *steps]))
        else:
            return super().visit_var_binding_(binding)
        self.builder_.emit_normalized(relax.VarBinding(binding.var, self.builder_.normalize(kernel)))


def _scaled_masked(scores, scale: GenericConst | None, masks):
    """`scores * scale + mask` on te tensors, broadcasting as the Relax ops did."""
    scaled = scores if scale is None else topi.multiply(scores, float(scale.value.numpy()))
    return topi.add(scaled, masks[0]) if masks else scaled


def _expanded(tree, tensors):
    """The te tensor of a `_sum_prologue` tree over `tensors` (its leaves)."""
    kind, *parts = tree
    if kind == "leaf":
        return tensors[parts[0]]
    if kind == "add":
        return topi.add(*(_expanded(part, tensors) for part in parts))
    if kind == "wrapped":  # negative indices counted from the end
        indices, count = _expanded(parts[0], tensors), parts[1]
        return te.compute(indices.shape, lambda *i: tvm.tirx.Select(indices(*i) < 0, indices(*i) + count, indices(*i)),
                          name="indices")
    table, ids, mode = parts
    return topi.take(_expanded(table, tensors), _expanded(ids, tensors), axis=0, mode=mode)


def _known_fp32(mask: relax.Expr) -> bool:
    """An fp32 tensor of known shape: a mask the kernel can broadcast as the add did."""
    return isinstance(mask.ty, relax.TensorType) and mask.ty.shape is not None and str(mask.ty.dtype) == "float32"


def _rows_lowerable(data: relax.Expr, axes) -> bool:
    """fp32 `data` of known rank >= 2 (rows, as the kernel's schedule loops over them) reduced
    over its last axis."""
    if not isinstance(data.ty, relax.TensorType) or data.ty.shape is None or str(data.ty.dtype) != "float32" \
            or data.ty.ndim < 2:
        return False
    return [a % data.ty.ndim for a in axes] == [data.ty.ndim - 1]


def _layer_norm_lowerable(call: relax.Call, lanes: int) -> bool:
    data, gamma, beta = call.args
    width = data.ty.shape[-1] if _rows_lowerable(data, [int(a) for a in call.attrs.axes]) else None
    return (isinstance(width, tvm.tirx.IntImm) and call.attrs.center
            and call.attrs.scale and all(a.ty.ndim == 1 and str(a.ty.dtype) == "float32" for a in (gamma, beta)))


def LowerRowwise(lanes: int) -> tvm.transform.Pass:
    """`lanes`: the vector width in fp32 lanes, the width of each row's partial reductions."""

    @tvm.transform.module_pass(opt_level=0, name="tvm_fuse.LowerRowwise")
    def lower(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        lowerer = _RowwiseLowerer(mod, lanes)
        return mutate_functions(mod, lowerer, lowerer.lower)

    return lower
