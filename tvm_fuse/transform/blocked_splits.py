"""Channel splits and concats of blocked tensors in the blocked layout, where they cut at whole
blocks.

`BlockedLayout` brings a split's input back to NCHW (TVM's split rule gets blocked channels
wrong), and a concat whose parts come from NCHW stays in NCHW: YOLOv8's C2f block, a conv split
in halves and the halves concatenated with the convs after them, ran a layout change into
NCHW, the split, a change back of each half, then the concat in NCHW and a change of its
result: four copies of each tensor around every block. Where the blocked tensor's channels are
cut at multiples of its block, the split is a split of whole blocks on the block axis, and a
change back of a changed tensor returns it; so:

- `split(to_nchw(x), channels)` -> each part `to_nchw(split(x, channels // block))`;
- `to_blocked(to_nchw(x))` -> `x`, the same blocked shape;
- `to_blocked(concat([to_nchw(x), ...]))` -> `concat([x, ...])` on the block axis, every part
  a whole number of blocks of the same block.

A change that is not one of these two maps (a block other than the concat's, padding) or a cut
inside a block is left as it is.
"""

from __future__ import annotations

import tvm
from tvm import relax, tirx
from tvm.relax.expr_functor import PyExprMutator, mutator

from .relax_helpers import blocked_from_nchw, is_op, mutate_functions, nchw_from_blocked, static_shape


def BlockedSplits() -> tvm.transform.Pass:
    @tvm.transform.module_pass(opt_level=0, name="tvm_fuse.BlockedSplits")
    def rewrite(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        mutator_ = _Rewriter(mod)
        return mutate_functions(mod, mutator_, mutator_.rewrite)

    return rewrite


def _nchw_block(transform) -> int | None:
    """The block of a `layout_transform` from NCHW{c}c to NCHW, else None."""
    source = nchw_from_blocked(transform)
    return int(source.ty.shape[-1]) if source is not None and static_shape(source) is not None else None


def _blocked_block(transform) -> int | None:
    """The block of a `layout_transform` from NCHW to NCHW{c}c, else None."""
    return int(transform.ty.shape[-1]) if blocked_from_nchw(transform) is not None else None


def _cuts(split: relax.Call, channels: int) -> list[int] | None:
    """A channel split's cut points, or None if it splits another axis."""
    if int(split.attrs.axis) != 1:
        return None
    sections = split.attrs.indices_or_sections
    if isinstance(sections, tirx.IntImm):
        count = int(sections)
        return [channels // count * i for i in range(1, count)] if channels % count == 0 else None
    return [int(c) for c in sections]


@mutator
class _Rewriter(PyExprMutator):
    def __init__(self, mod: tvm.IRModule):
        super().__init__(mod)
        self.values: dict[relax.Var, relax.Expr] = {}  # every binding of the rewritten function

    def rewrite(self, func: relax.Function) -> relax.Function | None:
        self.values = {}
        rewritten = self.visit_expr(func)
        return None if rewritten.same_as(func) else relax.analysis.remove_all_unused(rewritten)

    def _value(self, var):
        """`var`'s value, through a tuple's field."""
        value = self.values.get(var)
        if isinstance(value, relax.TupleGetItem):
            tuple_value = self.values.get(value.tuple_value)
            if isinstance(tuple_value, relax.Tuple):
                return self._value(tuple_value.fields[value.index])
        return value

    def _emit(self, value: relax.Expr, name: str) -> relax.Var:
        var = self.builder_.emit(value, name)
        self.values[var] = value
        return var

    def visit_var_binding_(self, binding: relax.VarBinding) -> None:
        value = self.visit_expr(binding.value)
        new = self._rewritten(value, binding.var.name)
        if new is None or not isinstance(binding.var, relax.DataflowVar):  # a block's output keeps its variable
            value = value if new is None else new
            self.builder_.emit_normalized(relax.VarBinding(binding.var, value))
            self.values[binding.var] = value
        else:
            self.set_var_remap(binding.var, new)

    def _rewritten(self, value: relax.Expr, name: str) -> relax.Var | None:
        if is_op(value, "relax.split"):
            return self._split(value, name)
        if _blocked_block(value) is not None:
            return self._to_blocked(value, name)
        return None

    def _split(self, split: relax.Call, name: str) -> relax.Var | None:
        source = self._value(split.args[0])
        block = _nchw_block(source)
        shape = static_shape(split.args[0])
        cuts = _cuts(split, shape[1]) if block is not None and shape is not None else None
        if cuts is None or any(cut % block for cut in cuts):
            return None
        # The blocked split and its parts take the split's name (its ONNX node: calibration
        # names its outputs by it); the NCHW copies, which only readers left in NCHW keep, none.
        blocked = self._emit(relax.op.split(source.args[0], [cut // block for cut in cuts], axis=1), name)
        parts = [self._emit(relax.TupleGetItem(blocked, i), name) for i in range(len(cuts) + 1)]
        nchw = [self._emit(relax.op.layout_transform(part, source.attrs.index_map), "lv") for part in parts]
        return self._emit(relax.Tuple(nchw), "lv")

    def _to_blocked(self, transform: relax.Call, name: str) -> relax.Var | None:
        block, target = _blocked_block(transform), static_shape(transform)
        source = self._value(transform.args[0])
        if _nchw_block(source) == block and static_shape(source.args[0]) == target:
            return source.args[0]
        if not is_op(source, "relax.concat") or int(source.attrs.axis) != 1:
            return None
        fields = source.args[0] if isinstance(source.args[0], relax.Tuple) else self.values.get(source.args[0])
        if not isinstance(fields, relax.Tuple):
            return None
        parts = [self._value(part) for part in fields.fields]
        if not all(_nchw_block(part) == block for part in parts):
            return None
        return self._emit(relax.op.concat([part.args[0] for part in parts], axis=1), transform.args[0].name)
