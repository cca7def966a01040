"""Normalizations along the last axis, whose per-row reductions TVM's own lowering runs one
element at a time: layer norm and softmax. Each reduction here is split so that it vectorizes:
`lanes` partial results, each over every `lanes`-th element of the row, then those combined."""

from __future__ import annotations

from tvm import te, tirx
from tvm.sym import Analyzer

from ..ir_names import ROWWISE_RULE, SCHEDULE_RULE
from .fast_math import exp


def layer_norm_rows(x: te.Tensor, gamma: te.Tensor, beta: te.Tensor, epsilon: float, lanes: int) -> te.Tensor:
    """`(x - mean) / sqrt(var + epsilon) * gamma + beta` over the last axis, of a static width;
    the variance about the mean, in a second pass."""
    *rows, width = x.shape
    width = int(width)
    zero = tirx.const(0.0, x.dtype)  # past the row's end, where `lanes` does not divide it
    total = row_reduction(x, x, te.sum, lanes, "sum", anchor=True, identity=zero)
    mean = te.compute(rows, lambda *r: total(*r) / float(width), name="mean")

    def square(*i):
        deviation = x(*i) - mean(*i[:-1])
        return deviation * deviation

    squares = row_reduction(x, square, te.sum, lanes, "squares", identity=zero)
    scale = te.compute(rows, lambda *r: te.rsqrt(squares(*r) / float(width) + epsilon), name="inverse_std")
    return te.compute(x.shape, lambda *i: (x(*i) - mean(*i[:-1])) * scale(*i[:-1]) * gamma[i[-1]] + beta[i[-1]],
                      name="layer_norm")


def softmax_rows(x: te.Tensor, lanes: int) -> te.Tensor:
    """`exp(x - max) / sum(exp(x - max))` over the last axis, of any width (a sequence length
    too); exp is `fast_math.exp`, which vectorizes."""
    lowest = tirx.min_value(x.dtype)
    peak = row_reduction(x, x, te.max, lanes, "max", anchor=True, identity=lowest)
    exps = exp(te.compute(x.shape, lambda *i: x(*i) - peak(*i[:-1]), name="shifted"), nonpositive=True)
    total = row_reduction(exps, exps, te.sum, lanes, "sum", identity=tirx.const(0.0, x.dtype))
    inverse = te.compute(total.shape, lambda *r: tirx.const(1.0, x.dtype) / total(*r), name="inverse_sum")
    return te.compute(x.shape, lambda *i: exps(*i) * inverse(*i[:-1]), name="softmax")


def row_reduction(x: te.Tensor, element, reducer, lanes: int, name: str, anchor: bool = False,
                  identity=None) -> te.Tensor:
    """`reducer` over each row of `element(*index)` (`x`'s shape): `lanes` partial results
    (the schedule's vector), then across them. A kernel's first reduction carries its rule. A
    width `lanes` does not provably divide (a symbolic one unless padded to a multiple) needs
    the reducer's `identity`, which the partial results take past the row's end."""
    *rows, width = x.shape
    whole = Analyzer().can_prove(tirx.floormod(width, lanes) == 0)  # a padded symbolic width too
    group = te.reduce_axis((0, width // lanes if whole else (width + lanes - 1) // lanes), name="group")

    def term(*index):
        *row, lane = index
        position = group * lanes + lane
        if whole:
            return element(*row, position)
        return te.if_then_else(position < width, element(*row, te.min(position, width - 1)), identity)

    partial = te.compute((*rows, lanes), lambda *i: reducer(term(*i), axis=group),
                         name=f"partial_{name}", attrs={SCHEDULE_RULE: ROWWISE_RULE} if anchor else {})
    lane = te.reduce_axis((0, lanes), name="lane")
    return te.compute(rows, lambda *r: reducer(partial[(*r, lane)], axis=lane), name=f"row_{name}")
