"""Scaled dot-product attention in one kernel: `softmax(Q K^T * scale + mask) V` for every
head, with Q, K and V read where their dense layers wrote them, `[batch, tokens, heads * D]`
or, where those layers write each head's columns together (`FuseAttention`), `[batch, heads,
tokens, D]`, and the result written `[batch, tokens, heads * D]`, so no head transpose and no
`[tokens, tokens]` score tensor reaches memory: each task holds its head's keys (transposed,
scaled) and a block of query rows' scores, exponentials and context in buffers of its own.

With `bf16` (a bf16 build), both products multiply bf16 pairs and add in fp32 (`vdpbf16ps`):
Q rounded, and the keys (scaled) and values rounded and paired along the reduction, once per
task, the exponentials rounded as the softmax writes them; the softmax itself stays fp32.

Keys are computed padded to whole vectors (`KEY_MULTIPLE`, zeros whose scores the softmax
leaves out) and query rows to whole row blocks (`matmul.ROW_MULTIPLE`, the last real row
again), so a build for any sequence length runs the tiles of a static one."""

from __future__ import annotations

from tvm import te, tirx

from ..ir_names import ATTENTION_BF16_RULE, ATTENTION_RULE, DOT_PRODUCT_ATTR, SCHEDULE_RULE
from .bf16 import PAIR, from_bits, to_bits
from .fast_math import exp
from .matmul import ROW_MULTIPLE, is_one, padded, static_value
from .rowwise import row_reduction

KEY_MULTIPLE = 32  # keys are computed padded to this: two zmm vectors of fp32, a score tile's width


def attention(query: te.Tensor, key: te.Tensor, value: te.Tensor, mask: te.Tensor | None, heads: int,
              scale: float, lanes: int, mask_padded: bool = False, bf16: str | None = None,
              offsets: tuple = (0, 0, 0), width: int | None = None, heads_first: bool = False,
              zero_undefined_rows: bool = False) -> te.Tensor:
    """`query [B, Sq, heads*D]`, `key` and `value [B, Sk, heads*D]` (`heads_first`: `[B,
    heads, Sq, D]` and `[B, heads, Sk, D]`); `mask` (or None) added to the scaled scores,
    broadcast to `[B, heads, Sq, Sk]` as numpy would, its key axis either 1 or Sk
    (`mask_padded`: Sk padded by `pad_keys`). `lanes`: the vector width of the softmax's
    reductions. `bf16`: "vdpbf16ps" or "portable" (its form on any CPU) for bf16 products
    (`bf16_fits` the depth), None for fp32. `offsets`: the first column of Q, K and V in their
    tensors (a multiple of D), which are `width` (default: all their) columns wide from there
    (slices of one packed projection). `zero_undefined_rows`: a row whose softmax is undefined
    (every key masked by -inf, or a NaN score: no finite sum) is 0, not NaN, as torch's exported
    `scaled_dot_product_attention` zeroes it. The result is `[B, Sq, heads*D]`."""
    tokens = 2 if heads_first else 1
    batch, queries, keys = query.shape[0], query.shape[tokens], key.shape[tokens]
    if width is None:
        width = int(query.shape[1]) * int(query.shape[3]) if heads_first else int(query.shape[2])
    depth = width // heads
    key_columns, real_key, key_index = _padding(keys, KEY_MULTIPLE)
    query_rows, _, query_index = _padding(queries, ROW_MULTIPLE)

    read = tuple(_reader(x, at, depth, heads_first) for x, at in zip((query, key, value), offsets))
    products = _Bf16Products(bf16, depth, read) if bf16 else _Fp32Products(depth, read)
    scores = products.scores(batch, heads, query_rows, key_columns, real_key, key_index, query_index, scale)
    lowest = tirx.min_value("float32")

    def logit(b, h, i, j):
        masked = scores[b, h, i, j]
        if mask is not None:
            masked = masked + _mask_value(mask, (b, h, query_index(i), j if mask_padded else key_index(j)))
        return real_key(j, masked, lowest)

    logits = te.compute(scores.shape, logit, name="logits")  # as the score tile is stored
    peak = row_reduction(logits, logits, te.max, lanes, "max")
    shifted = te.compute(scores.shape, lambda b, h, i, j: logits[b, h, i, j] - peak[b, h, i], name="shifted")
    powers = exp(shifted, nonpositive=True)
    exps = te.compute(scores.shape, lambda b, h, i, j: real_key(j, powers[b, h, i, j]), name="exps")
    total = row_reduction(exps, exps, te.sum, lanes, "sum")
    inverse = te.compute(total.shape, lambda *r: tirx.const(1.0, "float32") / total(*r), name="inverse_sum")
    context = products.context(exps, batch, query_rows, width, keys, key_columns, real_key, key_index)

    def output(b, s, c):
        row = context[b, s, c] * inverse[b, c // depth, s]
        if not zero_undefined_rows:
            return row
        # A defined row sums to at least 1 (its largest term is exp(0)); an undefined one to 0 or NaN.
        return tirx.Select(tirx.isfinite(inverse[b, c // depth, s]), row, tirx.const(0.0, "float32"))

    return te.compute((batch, queries, width), output, name="attention")


def pad_keys(mask: te.Tensor) -> te.Tensor:
    """`mask` with its key (last) axis padded as the kernel pads keys, zeros past the end:
    where keys are padded, a mask read at a clamped key index would be gathered lane by lane
    (a sixth of the kernel's time at 128 keys); one such copy serves every layer."""
    *lead, keys = mask.shape
    columns, real, index = _padding(keys, KEY_MULTIPLE)
    return te.compute((*lead, columns), lambda *i: real(i[-1], mask[(*i[:-1], index(i[-1]))]), name="padded_mask")


def keys_padded(keys) -> bool:
    """Whether the kernel computes `keys` keys padded (`pad_keys` pays off for its mask)."""
    return not _whole(keys, KEY_MULTIPLE)


def _whole(dim, multiple: int) -> bool:
    """Whether `dim` is a static multiple of `multiple` (computed as it is, unpadded)."""
    value = static_value(dim)
    return value is not None and value % multiple == 0


def _padding(dim, multiple: int):
    """`dim` rounded up to a multiple of `multiple`; `real(index, value, past=0)`: `value`
    where `index` is inside `dim`, `past` beyond; `inside(index)`: the index to read, the
    last one inside `dim` for the padding."""
    if _whole(dim, multiple):
        return dim, lambda index, inside, past=None: inside, lambda index: index
    value = static_value(dim)
    rounded = (value + multiple - 1) // multiple * multiple if value is not None else padded(dim, multiple)

    def real(index, inside, past=None):  # a select, not a branch: what `inside` reads is in bounds
        return tirx.Select(index < dim, inside, tirx.const(0.0, "float32") if past is None else past)

    return rounded, real, lambda index: te.min(index, dim - 1)


def _mask_value(mask: te.Tensor, index):
    """`mask` at scores `index` (b, h, i, j), broadcast from the right."""
    offset = 4 - len(mask.shape)
    return mask[tuple(0 if is_one(dim) else index[offset + a] for a, dim in enumerate(mask.shape))]


def _reader(tensor: te.Tensor, first: int, depth: int, heads_first: bool):
    """`read(b, token, head, d)`: element d of that head in `tensor`, whose heads start at
    column `first`."""
    if heads_first:
        return lambda b, token, head, d: tensor[b, first // depth + head, token, d]
    return lambda b, token, head, d: tensor[b, token, first + head * depth + d]


def bf16_fits(depth: int, lanes: int) -> bool:
    """Whether bf16 products serve a head of `depth`: whole vectors of its channels."""
    return depth % lanes == 0


class _Fp32Products:
    """Q K^T and P V in fp32: the keys transposed and scaled once per task."""

    def __init__(self, depth: int, read: tuple):
        self.depth = depth
        self.query, self.key, self.value = read  # `_reader`s

    def scores(self, batch, heads, rows, columns, real_key, key_index, query_index, scale):
        depth = self.depth
        keys_t = te.compute(  # this head's keys as columns, scaled, zero past the last
            (batch, heads, depth, columns),
            lambda b, h, d, j: real_key(j, self.key(b, key_index(j), h, d) * tirx.const(scale, "float32")),
            name="keys_t")
        d = te.reduce_axis((0, depth), name="d")
        return te.compute(
            (batch, heads, rows, columns),
            lambda b, h, i, j: te.sum(self.query(b, query_index(i), h, d) * keys_t[b, h, d, j], axis=d),
            name="scores", attrs={SCHEDULE_RULE: ATTENTION_RULE})

    def context(self, exps, batch, rows, width, keys, columns, real_key, key_index):
        depth = self.depth
        j = te.reduce_axis((0, keys), name="j")
        return te.compute(
            (batch, rows, width),
            lambda b, i, c: te.sum(exps[b, c // depth, i, j] * self.value(b, j, c // depth, c % depth), axis=j),
            name="context")


class _Bf16Products:
    """Q K^T and P V as sums of bf16 pair products (`vdpbf16ps`, or `portable`): Q rounded
    (`query_bf16`), this head's keys scaled, rounded and paired along the depth [D/2, Sk, 2]
    (`keys_t`), its values paired along the keys [Sk/2, D, 2] (`values_t`), the exponentials
    rounded (`exps_bf16`); padded keys are zeros in every one."""

    def __init__(self, instruction: str, depth: int, read: tuple):
        self.attrs = {DOT_PRODUCT_ATTR: instruction}
        self.depth = depth
        self.query, self.key, self.value = read  # `_reader`s

    def scores(self, batch, heads, rows, columns, real_key, key_index, query_index, scale):
        depth = self.depth
        query_bits = te.compute((batch, rows, heads * depth),
                                lambda b, i, c: to_bits(self.query(b, query_index(i), c // depth, c % depth)),
                                name="query_bf16")
        keys_t = te.compute(
            (batch, heads, depth // PAIR, columns, PAIR),
            lambda b, h, p, j, e: to_bits(real_key(j, self.key(b, key_index(j), h, p * PAIR + e)
                                                   * tirx.const(scale, "float32"))),
            name="keys_t")
        p = te.reduce_axis((0, depth // PAIR), name="p")
        e = te.reduce_axis((0, PAIR), name="e")
        return te.compute(
            (batch, heads, rows, columns),
            lambda b, h, i, j: te.sum(from_bits(query_bits[b, i, h * depth + p * PAIR + e])
                                      * from_bits(keys_t[b, h, p, j, e]), axis=[p, e]),
            name="scores", attrs={SCHEDULE_RULE: ATTENTION_BF16_RULE, **self.attrs})

    def context(self, exps, batch, rows, width, keys, columns, real_key, key_index):
        depth = self.depth
        exps_bits = te.compute(exps.shape, lambda *i: to_bits(exps(*i)), name="exps_bf16")
        values_t = te.compute(
            (batch, width // depth, columns // PAIR, depth, PAIR),
            lambda b, h, q, c, e: to_bits(real_key(q * PAIR + e, self.value(b, key_index(q * PAIR + e), h, c))),
            name="values_t")
        q = te.reduce_axis((0, columns // PAIR), name="q")
        e = te.reduce_axis((0, PAIR), name="e")
        return te.compute(
            (batch, rows, width),
            lambda b, i, c: te.sum(from_bits(exps_bits[b, c // depth, i, q * PAIR + e])
                                   * from_bits(values_t[b, c // depth, q, c % depth, e]), axis=[q, e]),
            name="context", attrs=self.attrs)
