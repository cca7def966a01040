"""Give scaled dot-product attention, as BERT-style exporters write it, one kernel
(`compute.attention`):

    q4 = permute_dims(reshape(q, [B, S, H, D]), [0, 2, 1, 3]) [* c]   (k4 likewise, as K^T; v4 unscaled)
    p = softmax(matmul(q4, k4) [* c | / c] [+ mask], axis=-1)   [p = where(isnan(p), 0, p)]
    out = reshape(permute_dims(matmul(p, v4), [0, 2, 1, 3]), [B, S, H * D])

Q, K and V are read where their dense layers wrote them and the result is written as the next
dense layer reads it, so the head transposes and the score tensors of the ops it replaces
never reach memory. The scale may also come as a factor on Q and one on K^T before the product,
and the softmax with its NaN rows zeroed, as torch exports `scaled_dot_product_attention`
(transformers 5's default attention: its masks add -inf). A chain of another form (another layout of the
heads, a mask of another dtype, a softmax over another axis) is left as it was, to
`LowerMatmuls` and `LowerRowwise`.

Q, K and V may be column slices of one packed dense layer's output (`PackProjections`): the
kernel reads them there. Where the attention is the only reader of the kernels that write Q, K
and V, those kernels write each head's columns together, `[B, H, S, D]` (their output buffer
transformed; their loops and knobs are unchanged), so that each (sequence, head) task reads
three contiguous blocks: row by row, a head's 128 bytes lie a page apart for MiniLM and every
read misses the prefetchers (its attention at batch 8 took a third longer in a model run).

In a bf16 build both products multiply bf16 pairs (`vdpbf16ps`) where the head's depth is
whole vectors; the softmax stays fp32 (`compute.attention`)."""

from __future__ import annotations

import tvm
from tvm import relax, s_tir

from .. import provenance
from ..compute.attention import attention, bf16_fits, keys_padded, pad_keys
from ..compute.matmul import same_dim, static_value
from ..ir_names import KERNEL_ATTR, OP_PATTERN_ATTR, OPAQUE, PATTERN_ATTR
from ..target import isa_features
from .realize.bf16 import BF16_ATTR
from .relax_helpers import is_op, mutate_functions, readers, scalar_value, use_counts

_HEADS_FIRST = (0, 2, 1, 3)  # [B, S, H, D] -> [B, H, S, D]
_KEYS_AS_COLUMNS = (0, 2, 3, 1)  # [B, S, H, D] -> [B, H, D, S]


@relax.expr_functor.mutator
class _AttentionFuser(relax.PyExprMutator):
    def __init__(self, mod: tvm.IRModule, lanes: int, bf16: str | None):
        super().__init__(mod)
        self.lanes = lanes
        self.bf16 = bf16
        self.values: dict[relax.Var, relax.Expr] = {}
        self.uses = None
        self.kernels: dict[relax.Var, tuple] = {}  # the output's binding -> its match
        self.padded_masks: dict[relax.Expr, relax.Var] = {}
        self.heads_first: dict[relax.Var, int] = {}  # a kernel output only attention reads -> its head depth
        self.absorbed: set[relax.Var] = set()  # bindings the attention kernels replace

    def fuse(self, func: relax.Function) -> relax.Function:
        self.values = {b.var: b.value for block in func.body.blocks for b in block.bindings}
        self.uses = use_counts(func)
        self.kernels, self.padded_masks, self.heads_first, self.absorbed = {}, {}, {}, set()
        reading = readers(func)
        for var, value in self.values.items():
            match = self._match(var, value)
            if match is not None:
                self.kernels[var] = match
                q, k, v, _mask, heads, _scale, _zero_rows, steps = match
                self.absorbed.update(steps[1:])  # steps[0] is `var`, which the kernel's call binds
                self.absorbed.update(x for x in (q, k, v) if self._columns(x)[0] is not x)  # slices read in place
                self._plan_heads_first((q, k, v), heads, steps, reading)
        return self.visit_expr(func)

    def _plan_heads_first(self, operands, heads: int, steps: list, reading: dict) -> None:
        """Note the kernels writing Q, K and V to write `[B, H, S, D]` (`_heads_first_kernel`)
        when this attention reads all they write, all three from such kernels."""
        depth = int(operands[0].ty.shape[2]) // heads
        sources = [self._columns(x) for x in operands]
        taken = set(steps) | set(operands)
        if all(first % depth == 0 and _single_output_kernel(self.values.get(x)) and _whole_heads(x, depth)
               and all(r is not None and r.var in taken for r in reading[x]) for x, first in sources):
            self.heads_first.update((x, depth) for x, _ in sources)

    def _only_reader(self, var) -> bool:
        return isinstance(var, relax.Var) and self.uses[var] == 1

    def _match(self, var: relax.Var, value) -> tuple | None:
        """(q, k, v, mask or None, heads, scale, steps) if `var = reshape(...)` ends an attention."""
        if not (is_op(value, "relax.reshape") and self._only_reader(value.args[0])):
            return None
        merged = self.values.get(value.args[0])
        if not (is_op(merged, "relax.permute_dims") and _axes(merged) == _HEADS_FIRST
                and self._only_reader(merged.args[0])):
            return None
        product = self.values.get(merged.args[0])
        if not (is_op(product, "relax.matmul") and self._only_reader(product.args[0])):
            return None
        steps = [var, value.args[0], merged.args[0], product.args[0]]
        probabilities = self._nan_guarded(product.args[0], steps)
        zero_undefined_rows = probabilities is not product.args[0]
        probabilities = self.values.get(probabilities)
        if not (is_op(probabilities, "relax.nn.softmax") and int(probabilities.attrs.axis) in (-1, 3)):
            return None
        (scores, scale, mask), prologue = self._prologue(probabilities.args[0])
        steps += prologue
        scores_value = self.values.get(scores)
        if not (is_op(scores_value, "relax.matmul") and self._only_reader(scores)):
            return None
        steps.append(scores)
        operands = []
        for operand, axes, scaled in ((scores_value.args[0], _HEADS_FIRST, True),
                                      (scores_value.args[1], _KEYS_AS_COLUMNS, True),
                                      (product.args[1], _HEADS_FIRST, False)):
            if scaled:  # torch's exported scaled_dot_product_attention scales Q and K^T by sqrt(c) each
                operand, factor = self._scaled(operand, steps)
                scale *= factor
            source = self._heads(operand, axes, steps)
            if source is None:
                return None
            operands.append(source)
        (q, heads, depth), (k, *k_split), (v, *v_split) = operands
        batches = [x.ty.shape[0] for x in (q, k, v)]
        if not (k_split == v_split == [heads, depth] and _known_width(value, heads * depth)
                and static_value(k.ty.shape[1]) != 1 and same_dim(k.ty.shape[1], v.ty.shape[1])
                and same_dim(batches[0], batches[1]) and same_dim(batches[0], batches[2])):
            return None
        return (q, k, v, mask, heads, scale, zero_undefined_rows, steps)

    def _nan_guarded(self, data, steps: list):
        """p of `data = where(isnan(p), 0, p)`, as torch exports `scaled_dot_product_attention`
        (a row of keys all masked by -inf is NaN in the softmax, 0 after this); the isnan and p
        join `steps`. `data` itself otherwise."""
        value = self.values.get(data)
        if not (is_op(value, "relax.where") and scalar_value(value.args[1]) == 0.0):
            return data
        condition, probabilities = value.args[0], value.args[2]
        test = self.values.get(condition)
        if not (is_op(test, "relax.isnan") and test.args[0].same_as(probabilities) and self._only_reader(condition)
                and isinstance(probabilities, relax.Var) and self.uses[probabilities] == 2):
            return data
        steps += [condition, probabilities]
        return probabilities

    def _prologue(self, data):
        """((scores, scale, mask or None), bindings) of `data = scores [* c | / c] [+ mask]`."""
        steps, mask = [], None
        value = self.values.get(data)
        if is_op(value, "relax.add") and self._only_reader(data) and _mask_like(value.args[1]) \
                and same_dim(value.ty.shape, value.args[0].ty.shape):  # the mask broadcasts to the scores
            steps.append(data)
            data, mask = value.args
        data, scale = self._scaled(data, steps)
        return (data, scale, mask), steps

    def _scaled(self, data, steps: list):
        """(x, c) of `data = x * c` (or `x / d`, c = 1 / d) by a scalar constant, when only one
        binding reads `data` (its own binding then joins `steps`); (data, 1.0) otherwise."""
        value = self.values.get(data)
        if is_op(value, "relax.multiply", "relax.divide") and self._only_reader(data):
            constant = scalar_value(value.args[1])
            if constant is not None and constant != 0:
                steps.append(data)
                return value.args[0], constant if value.op.name == "relax.multiply" else 1.0 / constant
        return data, 1.0

    def _heads(self, operand, axes: tuple, steps: list):
        """(x, heads, depth) if `operand` is `x [B, S, heads * depth]` split into heads and
        permuted by `axes` (through one or more permute_dims); their bindings join `steps`."""
        permutation = tuple(range(4))
        visited = []
        value = self.values.get(operand)
        while is_op(value, "relax.permute_dims") and _axes(value) is not None:
            permutation = tuple(_axes(value)[a] for a in permutation)  # operand axis a = input axis
            visited.append(operand)
            operand = value.args[0]
            value = self.values.get(operand)
        if not (is_op(value, "relax.reshape") and permutation == axes):
            return None
        x = value.args[0]
        split, whole = (list(t.shape) if isinstance(t, relax.TensorType) and t.shape is not None else None
                        for t in (value.ty, x.ty))
        if split is None or whole is None or len(split) != 4 or len(whole) != 3 or not _fp32(x):
            return None
        heads, depth, width = (static_value(d) for d in (split[2], split[3], whole[2]))
        if None in (heads, depth, width) or heads * depth != width or not all(
                same_dim(a, b) for a, b in zip(split[:2], whole[:2])):
            return None
        visited.append(operand)
        steps.extend(v for v in visited if self._only_reader(v))
        return x, heads, depth

    def visit_var_binding_(self, binding: relax.VarBinding) -> None:
        match = self.kernels.get(binding.var)
        if match is None:
            if binding.var in self.heads_first:
                return self._emit_heads_first(binding)
            if binding.var not in self.absorbed:
                super().visit_var_binding_(binding)
            return None
        q, k, v, mask, heads, scale, zero_undefined_rows, steps = match
        width = int(q.ty.shape[2])
        sources = [self._columns(x) for x in (q, k, v)]
        heads_first = all(source in self.heads_first for source, _ in sources)
        operands = [self.visit_expr(source) for source, _ in sources]
        padded = mask is not None and static_value(mask.ty.shape[-1]) != 1 and keys_padded(k.ty.shape[1])
        if mask is not None:
            operands.append(self._padded_mask(mask) if padded else self.visit_expr(mask))
        bf16 = self.bf16 if self.bf16 and bf16_fits(width // heads, self.lanes) else None
        offsets = tuple(first for _, first in sources)
        kernel = self.builder_.call_te(
            lambda query, key, value, *masks: attention(query, key, value, masks[0] if masks else None, heads, scale,
                                                        self.lanes, padded, bf16, offsets, width, heads_first,
                                                        zero_undefined_rows),
            *operands, primfunc_name_hint="attention",
            primfunc_attrs={PATTERN_ATTR: "attention", KERNEL_ATTR: "attention", OP_PATTERN_ATTR: OPAQUE,
                            **({BF16_ATTR: True} if bf16 else {})})
        kernel = provenance.recorded(kernel, map(provenance.node_index, steps))
        self.builder_.emit_normalized(relax.VarBinding(binding.var, self.builder_.normalize(kernel)))

    def _emit_heads_first(self, binding: relax.VarBinding) -> None:
        """The kernel call of `binding` writing `[B, N / D, S, D]`; its readers read that."""
        call, depth = binding.value, self.heads_first[binding.var]
        batch, tokens, width = binding.var.ty.shape
        kernel = self.builder_.add_func(_heads_first_kernel(self.builder_.get()[call.args[0]], depth),
                                        f"{call.args[0].name_hint}_by_head")
        by_head = relax.Call(call.op, [kernel, *map(self.visit_expr, call.args[1:])], call.attrs,
                             [relax.TensorType([batch, int(width) // depth, tokens, depth], "float32")], call.span)
        self.set_var_remap(binding.var, self.builder_.emit(by_head, binding.var.name))

    def _columns(self, x: relax.Var) -> tuple:
        """(the tensor, its first column) that `x` is: where `x` is a slice of the last axis read
        only here (Q, K or V of `PackProjections`' packed dense layer), the packed output and
        the slice's first column, so the slice is never computed; else (x, 0)."""
        value = self.values.get(x)
        if is_op(value, "relax.strided_slice") and self._only_reader(x) and len(value.args) == 4:
            source, axes, begin, _end = value.args
            if _fp32(source) and source.ty.ndim == 3 and [int(a) for a in axes] in ([2], [-1]) \
                    and all(same_dim(source.ty.shape[axis], x.ty.shape[axis]) for axis in (0, 1)):
                return source, int(begin[0])
        return x, 0

    def _padded_mask(self, mask: relax.Expr) -> relax.Expr:
        """`mask` with its keys padded as the kernel pads them, one copy for every layer it serves."""
        if mask not in self.padded_masks:
            self.padded_masks[mask] = self.builder_.emit(
                self.builder_.call_te(pad_keys, self.visit_expr(mask), primfunc_name_hint="pad_mask_keys"),
                "padded_mask")
        return self.padded_masks[mask]


def _single_output_kernel(value) -> bool:
    """A call of one of our TIR kernels that writes one fp32 tensor `[B, S, N]`."""
    return is_op(value, "relax.call_tir") and isinstance(value.ty, relax.TensorType) and value.ty.ndim == 3 \
        and str(value.ty.dtype) == "float32"


def _whole_heads(x: relax.Var, depth: int) -> bool:
    """Whether `x`'s columns are whole heads of `depth` (a packed output may hold other columns)."""
    width = static_value(x.ty.shape[2])
    return width is not None and width % depth == 0


def _heads_first_kernel(kernel: tvm.tirx.PrimFunc, depth: int) -> tvm.tirx.PrimFunc:
    """`kernel`, whose last stage writes its output `[B, S, N]`, writing it `[B, N / depth, S,
    depth]`: only the store's address changes. A product without an epilogue gets a copy as
    one: its register tile, cached over the transformed layout, would be written back over the
    whole heads its columns touch, uncomputed columns too."""
    sch = s_tir.Schedule(kernel)
    last = sch.get_child_blocks(sch.get_sblock("root"))[-1]
    if any(v.iter_type == tvm.tirx.IterVar.CommReduce for v in sch.get(last).iter_vars):
        sch.cache_write(last, 0, "global")
        last = sch.get_child_blocks(sch.get_sblock("root"))[-1]
    sch.transform_layout(last, ("write", 0), lambda b, s, n: (b, n // depth, s, n % depth))
    return sch.mod["main"]


def _axes(call: relax.Call) -> tuple | None:
    axes = call.attrs.axes
    return None if axes is None else tuple(int(a) for a in axes)


def _fp32(expr: relax.Expr) -> bool:
    return isinstance(expr.ty, relax.TensorType) and str(expr.ty.dtype) == "float32"


def _mask_like(mask: relax.Expr) -> bool:
    """An fp32 tensor of known shape the kernel can broadcast to the scores, as the add did."""
    return _fp32(mask) and mask.ty.shape is not None and len(mask.ty.shape) <= 4


def _known_width(expr: relax.Expr, width: int) -> bool:
    shape = expr.ty.shape
    return shape is not None and len(shape) == 3 and static_value(shape[2]) == width


def bf16_products(target: tvm.target.Target) -> str:
    """The instruction bf16 attention products run on: `vdpbf16ps`, or its portable form where
    the target lacks AVX512-BF16 (a build `RealizeBf16(native=False)` makes to test anywhere)."""
    return "vdpbf16ps" if "avx512_bf16" in isa_features(target) else "portable"


def FuseAttention(lanes: int, bf16: str | None = None) -> tvm.transform.Pass:
    """`lanes`: the vector width in fp32 lanes, the width of the softmax's partial reductions.
    `bf16`: the instruction of bf16 products (`bf16_products`), None for fp32."""

    @tvm.transform.module_pass(opt_level=0, name="tvm_fuse.FuseAttention")
    def fuse(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        fuser = _AttentionFuser(mod, lanes, bf16)
        fused = mutate_functions(mod, fuser, lambda func: relax.analysis.remove_all_unused(fuser.fuse(func)))
        return relax.transform.DeadCodeElimination()(fused)  # a kernel whose calls now write by head

    return fuse
