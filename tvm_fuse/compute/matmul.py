"""Matrix products with constant weights: dense `x[..., K] @ W[K, N]` (with W packed in
blocks of output columns when the vector width divides N) and batched `x[..., M, K] @
W[..., K, N]`, leading dims broadcast as in numpy. Packed weights of another dtype than `x`
(s8 weights of an int8 build) are converted as they are loaded, so they stay small in memory."""

from __future__ import annotations

import numpy as np
from tvm import te

from . import SCHEDULE_RULE

MATMUL_RULE = "tvm_fuse.matmul"
DENSE_PACKED_RULE = "tvm_fuse.dense_packed"


def packing_block(columns: int, lanes: int) -> int:
    """The block of output columns to pack s8 dense weights in: the widest of `lanes`,
    `lanes`/2, ... 1 that divides `columns`. Unpacked, each parallel task reads a strip of
    every weight row narrower than a cache line, in strides of the row: 1000 classes' s8
    weights took 3.5x as long as packed in blocks of 8 (fp32 ones, whose strips span lines,
    take as long either way)."""
    return next(b for b in (lanes >> s for s in range(lanes.bit_length())) if columns % b == 0)


def pack_dense_weight(weight: np.ndarray, block: int) -> np.ndarray:
    """W[K, N] as [N / block, K, block]: each block of output columns contiguous along K."""
    k, n = weight.shape
    return np.ascontiguousarray(weight.reshape(k, n // block, block).transpose(1, 0, 2))


def dense_packed(x: te.Tensor, packed: te.Tensor) -> te.Tensor:
    """`x[..., K] @ W[K, N]` with W given by `pack_dense_weight`."""
    chunks, _, block = packed.shape
    k = te.reduce_axis((0, x.shape[-1]), name="k")

    def value(*idx):
        *rows, n = idx
        return te.sum(x[(*rows, k)] * packed[n // block, k, n % block].astype(x.dtype), axis=k)

    return te.compute((*x.shape[:-1], chunks * block), value, name="matmul", attrs={SCHEDULE_RULE: DENSE_PACKED_RULE})


def matmul(x: te.Tensor, weight: te.Tensor) -> te.Tensor:
    """numpy's `x @ weight`, both of rank >= 2."""
    lead = max(len(x.shape), len(weight.shape)) - 2
    out_lead = [
        _lead_dim(x, a, lead) if not _is_one(_lead_dim(x, a, lead)) else _lead_dim(weight, a, lead)
        for a in range(lead)
    ]
    k = te.reduce_axis((0, x.shape[-1]), name="k")

    def value(*idx):
        batch, m, n = idx[:lead], idx[lead], idx[lead + 1]
        return te.sum(x[(*_broadcast(x, batch), m, k)] * weight[(*_broadcast(weight, batch), k, n)], axis=k)

    shape = (*out_lead, x.shape[-2], weight.shape[-1])
    return te.compute(shape, value, name="matmul", attrs={SCHEDULE_RULE: MATMUL_RULE})


def _lead_dim(tensor: te.Tensor, axis: int, lead: int):
    """Dim `axis` of the output's leading dims as `tensor` sees it (1 where it has none)."""
    offset = lead - (len(tensor.shape) - 2)
    return tensor.shape[axis - offset] if axis >= offset else 1


def _broadcast(tensor: te.Tensor, batch) -> list:
    """`tensor`'s leading indices for output batch index `batch` (size-1 dims read index 0)."""
    dims = tensor.shape[:-2]
    offset = len(batch) - len(dims)
    return [0 if _is_one(d) else batch[offset + a] for a, d in enumerate(dims)]


def _is_one(dim) -> bool:
    return (isinstance(dim, int) and dim == 1) or getattr(dim, "value", None) == 1
