"""Pack the query, key and value projections of an attention block into one dense layer.

BERT-style exporters write three dense layers (`matmul(x, W) + b`) that read the same input,
each split into heads by a reshape. As three kernels, each reads (and, in an int8 or bf16 build,
rounds or quantizes) the input again and runs a tile grid a third as wide; as one, the input is
read once and the tiles span all three weights' columns. Here, such dense layers become one,
its weights and biases concatenated at build time, and each former output a slice of its
columns: `FuseAttention` reads Q, K and V where the packed layer wrote them (the slices are
never computed); a block it does not take computes the slices as copies.

Only dense layers in `CanonicalizeDense`'s form whose output is read by one reshape to four
dims (a split into heads) take part, two or more reading the same input. The packed layer's
calls record every node of the layers it replaces (`provenance`)."""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import tvm
from tvm import relax
from tvm.ir.expr import GenericConst
from tvm.relax.expr_functor import PyExprMutator, mutator

from .. import provenance
from .relax_helpers import is_op, mutate_functions, readers


def PackProjections() -> tvm.transform.Pass:
    @tvm.transform.module_pass(opt_level=0, name="tvm_fuse.PackProjections")
    def pack(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        packer = _Packer(mod)

        def packed(func: relax.Function) -> relax.Function | None:
            groups = _groups(func)
            if not groups:
                return None
            packer.plan(groups)
            return relax.analysis.remove_all_unused(packer.visit_expr(func))

        return mutate_functions(mod, packer, packed)

    return pack


def _projection(var: relax.Var, value, values: dict, reads: dict):
    """(input, matmul's variable, weight, bias) if `var = add(matmul(x, W), b)`, W [K, N] and b
    [N] (or [1, ..., N]) fp32 constants, read once, by a reshape to four dims."""
    if not is_op(value, "relax.add") or len(reads.get(var, [])) != 1:
        return None
    (reader,) = reads[var]
    if reader is None or not is_op(reader.value, "relax.reshape") or reader.var.ty.ndim != 4:
        return None
    product, bias = value.args
    matmul = values.get(product)
    if not is_op(matmul, "relax.matmul") or len(reads.get(product, [])) != 1:
        return None
    x, weight = matmul.args
    constants = (weight, bias)
    if not all(isinstance(c, GenericConst) and str(c.ty.dtype) == "float32" for c in constants) \
            or weight.ty.ndim != 2 or str(x.ty.dtype) != "float32":
        return None
    *ones, columns = (int(d) for d in bias.ty.shape)  # from the types: no copy of the constants
    if columns != int(weight.ty.shape[1]) or any(d != 1 for d in ones):
        return None
    return x, product, weight, bias


def _groups(func: relax.Function) -> list[tuple]:
    """(the first matmul, the projections) of each group of two or more projections of `func`
    that read the same input, each projection (output, matmul, weight, bias), in binding order."""
    values = {b.var: b.value for block in func.body.blocks for b in block.bindings}
    order = {var: i for i, var in enumerate(values)}
    reads = readers(func)
    by_input = defaultdict(list)
    for var, value in values.items():
        found = _projection(var, value, values, reads)
        if found is not None:
            by_input[found[0]].append((var, *found[1:]))
    return [(min((product for _, product, _, _ in group), key=order.__getitem__), group)
            for group in by_input.values() if len(group) > 1]


@mutator
class _Packer(PyExprMutator):
    def plan(self, groups: list[tuple]) -> None:
        self.first = {}  # the first matmul of a group -> the group
        self.slices = {}  # a projection's output -> (its group's first matmul, first column, last)
        for first, group in groups:
            self.first[first] = group
            start = 0
            for output, _product, weight, _bias in group:
                end = start + int(weight.ty.shape[1])
                self.slices[output] = (first, start, end)
                start = end
        self.packed = {}  # a group's first matmul -> the packed output

    def visit_var_binding_(self, binding: relax.VarBinding) -> None:
        group = self.first.get(binding.var)
        if group is not None:
            self._emit_packed(binding, group)
            return
        found = self.slices.get(binding.var)
        if found is None:
            return super().visit_var_binding_(binding)
        first, start, end = found
        packed = self.packed[first]
        value = relax.op.strided_slice(packed, axes=[packed.ty.ndim - 1], begin=[start], end=[end])
        self.builder_.emit_normalized(relax.VarBinding(binding.var, self.builder_.normalize(value)))

    def _emit_packed(self, binding: relax.VarBinding, group: list[tuple]) -> None:
        """At the first matmul's binding (its input is bound by then): the packed matmul and add."""
        x = self.visit_expr(binding.value.args[0])
        weight = np.concatenate([w.value.numpy() for _, _, w, _ in group], axis=1)
        biases = [b.value.numpy() for _, _, _, b in group]  # each [N] or [1, ..., N]
        rank = max(b.ndim for b in biases)
        bias = np.concatenate([b.reshape(-1) for b in biases]).reshape((1,) * (rank - 1) + (-1,))
        product = provenance.recorded(relax.op.matmul(x, relax.const(weight)),
                                      [provenance.node_index(p) for _, p, _, _ in group])
        product = self.builder_.emit(product, binding.var.name)
        added = provenance.recorded(relax.op.add(product, relax.const(bias)),
                                    [provenance.node_index(output) for output, *_ in group])
        self.packed[binding.var] = self.builder_.emit(added, group[0][0].name)
