"""Matrix products with constant weights: dense `x[..., K] @ W[K, N]` (with W packed in
blocks of output columns of the vector's width, the last padded with zeros) and batched `x[..., M, K] @
W[..., K, N]`, leading dims broadcast as in numpy. Packed weights of another dtype than `x`
(s8 weights of an int8 build) are converted as they are loaded, so they stay small in memory.

A product's rows (and a batched product's columns) of symbolic count, a sequence length, are
computed padded to a multiple of `ROW_MULTIPLE` (`COLUMN_MULTIPLE`; the padding reads the last
real row or column again) and cropped as the result is stored: so the schedule tiles them as
it tiles a static count, with no bounds checks inside the tile (`padded`, `cropped`). So are
static row counts that no row tile of 4 or more divides (`padded_rows`: ViT's 197 tokens,
which tiles of one row computed at half the speed of 8)."""

from __future__ import annotations

import numpy as np
import tvm_ffi
from tvm import te, tirx

from ..ir_names import DENSE_PACKED_RULE, MATMUL_RULE, SCHEDULE_RULE

ROW_MULTIPLE = 8  # symbolic row counts are computed padded to this: the default row tile
COLUMN_MULTIPLE = 16  # and symbolic column counts to this: a zmm vector of fp32
ROW_TILES = (8, 6, 4)  # a static row count one of these divides is computed as it is
PADDED_ROWS_FROM = 48  # and so is any below this, where padding could add more than 7/48


def padded(dim, multiple: int = ROW_MULTIPLE):
    """`dim`, or a symbolic one rounded up to a multiple of `multiple`."""
    return dim if isinstance(static_value(dim), int) else (dim + multiple - 1) // multiple * multiple


def clamped(index, dim):
    """`index` along `dim` in a product computed `padded`: the padding reads the last element."""
    return index if isinstance(static_value(dim), int) else te.min(index, dim - 1)


def padded_rows(rows):
    """The rows a product computes for `rows`: `padded`, and a static count of at least
    `PADDED_ROWS_FROM` that no row tile of `ROW_TILES` divides rounded up to `ROW_MULTIPLE`."""
    value = static_value(rows)
    if value is None:
        return padded(rows)
    if value < PADDED_ROWS_FROM or any(value % tile == 0 for tile in ROW_TILES):
        return rows
    return (value + ROW_MULTIPLE - 1) // ROW_MULTIPLE * ROW_MULTIPLE


def row_source(row, rows):
    """The row of `rows` that computed row `row` reads (`padded_rows`): past the end, the last."""
    return row if padded_rows(rows) is rows else te.min(row, rows - 1)


def cropped(product: te.Tensor, shape) -> te.Tensor:
    """`product` (computed with padded dims) as `shape`; itself if nothing was padded."""
    if all(same_dim(a, b) for a, b in zip(product.shape, shape)):
        return product
    return te.compute(shape, lambda *i: product(*i), name="crop")


def same_dim(a, b) -> bool:
    """Whether two dims (or shapes) are the same: equal values, or the same symbolic expression."""
    if static_value(a) is not None or static_value(b) is not None:
        return static_value(a) == static_value(b)
    return tvm_ffi.structural_equal(a, b)


def static_value(dim) -> int | None:
    """A dim's value as an int, None when symbolic."""
    value = getattr(dim, "value", dim)
    return value if isinstance(value, int) else None


def packing_block(columns: int, lanes: int) -> int:
    """The block of output columns to pack s8 dense weights in: the widest of `lanes`,
    `lanes`/2, ... 1 that divides `columns`. Unpacked, each parallel task reads a strip of
    every weight row narrower than a cache line, in strides of the row: 1000 classes' s8
    weights took 3.5x as long as packed in blocks of 8 (fp32 ones, whose strips span lines,
    take as long either way)."""
    return next(b for b in (lanes >> s for s in range(lanes.bit_length())) if columns % b == 0)


def pack_dense_weight(weight: np.ndarray, block: int) -> np.ndarray:
    """W[K, N] as [ceil(N / block), K, block]: each block of output columns contiguous along K,
    the last padded with zero columns."""
    k, n = weight.shape
    weight = np.pad(weight, [(0, 0), (0, -n % block)])
    return np.ascontiguousarray(weight.reshape(k, -1, block).transpose(1, 0, 2))


def dense_packed(x: te.Tensor, packed: te.Tensor, columns: int | None = None) -> te.Tensor:
    """`x[..., K] @ W[K, N]` with W given by `pack_dense_weight`; `columns`: N, where the packed
    weight's last block was padded with zero columns (computed whole, then cropped)."""
    chunks, _, block = packed.shape
    k = te.reduce_axis((0, x.shape[-1]), name="k")

    def value(rows, n):
        return te.sum(x[(*rows, k)] * packed[n // block, k, n % block].astype(x.dtype), axis=k)

    return dense_product(x, columns or chunks * block, value, {SCHEDULE_RULE: DENSE_PACKED_RULE},
                         computed_columns=chunks * block)


def dense_product(x: te.Tensor, columns, value, attrs: dict, pad: bool = True, computed_columns=None) -> te.Tensor:
    """The product of a dense layer over `x[..., K]`: `value(x's leading indices, column)` for
    each of its rows and `columns` (computed for `computed_columns` and cropped, where more),
    the rows `padded` when their count is symbolic (unless not `pad`: a tile program that
    matches the plain indices, `schedules.amx`)."""
    computed_columns = computed_columns or columns
    if not pad or len(x.shape) < 2:
        product = te.compute((*x.shape[:-1], computed_columns), lambda *i: value(i[:-1], i[-1]), name="matmul",
                             attrs=attrs)
        return cropped(product, (*x.shape[:-1], columns))
    *lead, rows = x.shape[:-1]

    def padded_value(*index):
        *lead_index, row, column = index
        return value((*lead_index, row_source(row, rows)), column)

    product = te.compute((*lead, padded_rows(rows), computed_columns), padded_value, name="matmul", attrs=attrs)
    return cropped(product, (*x.shape[:-1], columns))


def matmul(x: te.Tensor, weight: te.Tensor) -> te.Tensor:
    """numpy's `x @ weight`, both of rank >= 2."""
    lead = max(len(x.shape), len(weight.shape)) - 2
    out_lead = [
        _lead_dim(x, a, lead) if not is_one(_lead_dim(x, a, lead)) else _lead_dim(weight, a, lead)
        for a in range(lead)
    ]
    k = te.reduce_axis((0, x.shape[-1]), name="k")
    rows, columns = x.shape[-2], weight.shape[-1]
    if padded(columns, COLUMN_MULTIPLE) is not columns:
        # Copied once with zero columns, so that vectors of columns load whole (a clamped
        # index per lane would gather).
        weight = te.compute((*weight.shape[:-1], padded(columns, COLUMN_MULTIPLE)),
                            lambda *i: te.if_then_else(i[-1] < columns, weight(*i[:-1], clamped(i[-1], columns)),
                                                       tirx.const(0, weight.dtype)), name="padded_columns")

    def value(*idx):
        batch, m, n = idx[:lead], row_source(idx[lead], rows), idx[lead + 1]
        return te.sum(x[(*_broadcast(x, batch), m, k)] * weight[(*_broadcast(weight, batch), k, n)], axis=k)

    product = te.compute((*out_lead, padded_rows(rows), padded(columns, COLUMN_MULTIPLE)), value, name="matmul",
                         attrs={SCHEDULE_RULE: MATMUL_RULE})
    return cropped(product, (*out_lead, rows, columns))


def _lead_dim(tensor: te.Tensor, axis: int, lead: int):
    """Dim `axis` of the output's leading dims as `tensor` sees it (1 where it has none)."""
    offset = lead - (len(tensor.shape) - 2)
    return tensor.shape[axis - offset] if axis >= offset else 1


def _broadcast(tensor: te.Tensor, batch) -> list:
    """`tensor`'s leading indices for output batch index `batch` (size-1 dims read index 0)."""
    dims = tensor.shape[:-2]
    offset = len(batch) - len(dims)
    return [0 if is_one(d) else batch[offset + a] for a, d in enumerate(dims)]


def is_one(dim) -> bool:
    """A dim of 1, which broadcasting reads at index 0."""
    return (isinstance(dim, int) and dim == 1) or getattr(dim, "value", None) == 1
