"""int8 dense layers: u8 activations times s8 weights packed [N/b, K/4, b, 4]
(`pack_dense_quads`), summed in s32, each step a b x 4 dot product: VNNI's `vpdpbusd`.

- Quantized at run time (ONNX Runtime's dynamic quantization, with a scale per group of a
  row instead of one per tensor): `quantize_rows` cuts each row of `x[..., K]` in groups and
  codes each group on its own range, `real = low + scale * code`; `dense_int8_groups` sums
  each group in s32 (on AMX tiles where they fit, a tile program per group) and scales it
  into fp32, `scale * sum + low * column_sum`.
- On a calibrated scale: `dense_int8` sums all of K in s32 (on AMX tiles where they fit), and
  `dequantize_product` takes it back to real values in the kernel's epilogue.

The layer's own post-ops follow, after each column's weight scale.
"""

from __future__ import annotations

import functools

import numpy as np
from tvm import te, tirx

from ..amx import fits_amx
from ..ir_names import (
    DENSE_AMX_GROUPS_RULE,
    DENSE_AMX_RULE,
    DENSE_INT8_GROUPS_RULE,
    DENSE_INT8_RULE,
    DOT_PRODUCT_ATTR,
    ROWWISE_RULE,
    SCHEDULE_RULE,
)
from .matmul import cropped, dense_product, packing_block, padded_rows, row_source
from .requantize import ROUNDING_SHIFT, U8_MAX

QUAD = 4  # u8 x s8 products per s32 lane of a `vpdpbusd`
# (vpdpbusd, vpmaddubsw, vpmaddwd) by lanes: LLVM's x86 intrinsics for zmm and ymm.
LLVM_INTRINSICS = {16: ("llvm.x86.avx512.vpdpbusd.512", "llvm.x86.avx512.pmaddubs.w.512", "llvm.x86.avx512.pmaddw.d.512"),
                   8: ("llvm.x86.avx512.vpdpbusd.256", "llvm.x86.avx2.pmadd.ub.sw", "llvm.x86.avx2.pmadd.wd")}
# Values per scale of a row quantized at run time. A transformer's hidden state has a few
# outlier channels (MiniLM's layer norm outputs: up to 20x the median channel), which set a
# whole row's range. In an emulation of MiniLM's int8 dense layers, groups of 64 cut the
# activations' share of the embeddings' error (1 - cosine, mean) from 7.1e-4 to 1.3e-4, and
# the sentences whose nearest neighbour changes from 8 of 204 to 3; for one conversion and
# two FMAs per 16 `vpdpbusd` steps (MiniLM's dense kernels 11-12% slower, Zen 4).
GROUP = 64


def pack_dense_quads(codes: np.ndarray, block: int) -> np.ndarray:
    """s8 W[K, N] as [N/block, K/4, block, 4]: four consecutive rows of a column side by side,
    the word a `vpdpbusd` lane multiplies. K is padded with zero rows to a multiple of 4."""
    k, n = codes.shape
    codes = np.pad(codes, [(0, -k % QUAD), (0, 0)])
    quads = codes.reshape(-1, QUAD, n // block, block)
    return np.ascontiguousarray(quads.transpose(2, 0, 3, 1))


def row_groups(width: int) -> tuple[int, int]:
    """(groups, group width): a row of `width` values is quantized in groups of about `GROUP`,
    each a multiple of 4 (a `vpdpbusd` quad) and none only padding."""
    size = QUAD * -(-width // (QUAD * -(-width // GROUP)))
    return -(-width // size), size


def quantize_rows(x: te.Tensor, lanes: int) -> tuple[te.Tensor, te.Tensor]:
    """(u8 codes [..., groups, size], per group (scale, low) [..., groups, 2]) of fp32 `x`, each
    row cut in `row_groups`. A group's range [low, high] maps onto codes 0..255 (a constant
    group: scale 1, codes 0). Codes count from `low`, not from a zero point, so that a group
    far from zero keeps its resolution. The padding past the row's end is code 0: it meets
    zero weights. `lanes`: the widest vector the reductions may use."""
    *rows, width = x.shape
    width = int(width)
    groups, size = row_groups(width)
    lanes = packing_block(size, lanes)

    def value(*index):  # the row's last value repeats in the padding, which leaves the range alone
        *row, group, k = index
        position = group * size + k
        return x(*row, position if groups * size == width else te.min(position, width - 1))

    shape = (*rows, groups, size)
    high = _group_reduction(shape, value, te.max, lanes, "max", anchor=True)
    low = _group_reduction(shape, value, te.min, lanes, "min")

    def scale(*group):
        spread = (high(*group) - low(*group)) / float(U8_MAX)
        return te.if_then_else(spread > 0, spread, tirx.const(1.0, "float32"))

    inverse = te.compute(shape[:-1], lambda *group: tirx.const(1.0, "float32") / scale(*group), name="row_inverse")
    # The codes read the reductions, not `params`: a kernel's outputs cannot feed each other.
    params = te.compute((*shape[:-1], 2), lambda *i: te.if_then_else(i[-1] == 0, scale(*i[:-1]), low(*i[:-1])),
                        name="row_params")

    def code(*index):  # rounded and saturated as `requantize._code`
        *group, k = index
        shifted = (value(*index) - low(*group)) * inverse(*group) + ROUNDING_SHIFT
        saturated = te.min(te.max(shifted, ROUNDING_SHIFT), ROUNDING_SHIFT + U8_MAX)
        code = tirx.reinterpret("int32", saturated).astype("uint8")
        return code if groups * size == width else \
            te.if_then_else(group[-1] * size + k < width, code, tirx.const(0, "uint8"))

    return te.compute(shape, code, name="row_codes"), params


def _group_reduction(shape, value, reducer, lanes: int, name: str, anchor: bool = False) -> te.Tensor:
    """`reducer` over each group of `value(*index)` (`shape`: [..., groups, size]): `lanes`
    partial results, each folded over a group's every `lanes`-th value by a vector expression
    (its few steps as a reduction loop, LLVM unrolled and scalarized), then across them (the
    schedule folds the lanes in halves, `schedules.intrinsics.across`)."""
    *groups, size = shape
    partial = te.compute((*groups, lanes), lambda *i: functools.reduce(
        reducer, (value(*i[:-1], step * lanes + i[-1]) for step in range(size // lanes))),
        name=f"partial_{name}", attrs={SCHEDULE_RULE: ROWWISE_RULE} if anchor else {})
    lane = te.reduce_axis((0, lanes), name="lane")
    return te.compute(groups, lambda *g: reducer(partial[(*g, lane)], axis=lane), name=f"group_{name}")


def dense_int8(codes: te.Tensor, packed: te.Tensor, vnni: bool = True, amx: bool = False) -> te.Tensor:
    """`codes[..., K] @ W` in s32, W packed by `pack_dense_quads`. `vnni`: the dot product the
    schedule tensorizes with (`vpdpbusd`, else `vpmaddubsw` + `vpmaddwd` on 7-bit weights).
    `amx`: computed on AMX tiles (`tdpbusd`) instead, where the shape `amx.fits_amx`."""
    chunks, quads, block, quad = packed.shape
    kq = te.reduce_axis((0, quads), name="kq")
    q = te.reduce_axis((0, quad), name="q")

    def value(rows, n):
        return te.sum(codes[(*rows, kq * QUAD + q)].astype("int32")
                      * packed[n // block, kq, n % block, q].astype("int32"), axis=[kq, q])

    attrs = {SCHEDULE_RULE: DENSE_AMX_RULE} if amx else \
        {SCHEDULE_RULE: DENSE_INT8_RULE, DOT_PRODUCT_ATTR: "vnni" if vnni else "avx512"}
    return dense_product(codes, chunks * block, value, attrs, pad=not amx)


def dequantize_product(acc: te.Tensor, params: te.Tensor, column_sums: te.Tensor, column_scales: te.Tensor) -> te.Tensor:
    """Real values of the s32 `acc` of codes on one calibrated (scale, low) (`params`, [2]),
    with each column's weight sum (in codes, as float) and scale."""

    def value(*index):
        in_codes = acc(*index).astype("float32") * params[0] + params[1] * column_sums[index[-1]]
        return in_codes * column_scales[index[-1]]

    return te.compute(acc.shape, value, name="dequantize_product")


def integer_product(acc: te.Tensor, zero_point: te.Tensor | None, column_sums: te.Tensor) -> te.Tensor:
    """The s32 `acc` of u8 codes times s8 weights as float32, less the codes' zero point (a
    scalar tensor, or None for 0) times each column's weight sum: the product of the codes
    less their zero point, as ONNX Runtime's MatMulInteger sums it."""
    if zero_point is None:
        return te.compute(acc.shape, lambda *i: acc(*i).astype("float32"), name="integer_product")
    return te.compute(acc.shape, lambda *i: acc(*i).astype("float32") - zero_point() * column_sums[i[-1]],
                      name="integer_product")


def dense_int8_groups(codes: te.Tensor, params: te.Tensor, packed: te.Tensor, column_sums: te.Tensor,
                      vnni: bool = True, amx: bool = False) -> te.Tensor:
    """`x @ W` in real values but for each column's weight scale, x given as `quantize_rows`
    codes [..., groups, size] with their (scale, low) [..., groups, 2]: per group an s32 sum
    of u8 x s8 quads (as `dense_int8`), then `scale * sum + low * column_sum` summed over the
    groups in fp32; `column_sums` [groups, N]: each group's weight codes summed per column.
    `amx`: each group's sum on AMX tiles (`fits_amx_groups`), the codes given as [..., groups
    * size] (a tile reads the group's rows at the row's stride)."""
    *lead, rows, groups, _ = params.shape
    chunks, quads, block, _ = packed.shape
    steps = quads // int(groups)
    kq = te.reduce_axis((0, steps), name="kq")
    q = te.reduce_axis((0, QUAD), name="q")
    row_count = rows if amx else padded_rows(rows)  # a tile program matches the plain indices

    def source(row):  # the row read for computed row `row`
        return row if amx else row_source(row, rows)

    def code(lead_index, row, group, k):
        if amx:
            return codes[(*lead_index, source(row), group * steps * QUAD + k)]
        return codes[(*lead_index, source(row), group, k)]

    def group_sum(*index):  # groups before rows: a tile's C block is then [rows, columns]
        *lead_index, group, row, n = index
        return te.sum(code(lead_index, row, group, kq * QUAD + q).astype("int32")
                      * packed[n // block, group * steps + kq, n % block, q].astype("int32"), axis=[kq, q])

    sums = te.compute((*lead, groups, row_count, chunks * block), group_sum, name="group_sums")
    group = te.reduce_axis((0, groups), name="group")

    def value(*index):
        *lead_index, row, n = index
        scale, low = (params[(*lead_index, source(row), group, j)] for j in (0, 1))
        return te.sum(sums[(*lead_index, group, row, n)].astype("float32") * scale + low * column_sums[group, n],
                      axis=group)

    attrs = {SCHEDULE_RULE: DENSE_AMX_GROUPS_RULE} if amx else \
        {SCHEDULE_RULE: DENSE_INT8_GROUPS_RULE, DOT_PRODUCT_ATTR: "vnni" if vnni else "avx512"}
    product = te.compute((*lead, row_count, chunks * block), value, name="matmul", attrs=attrs)
    return cropped(product, (*lead, rows, chunks * block))


def fits_amx_groups(width: int, block: int) -> bool:
    """Whether rows of `width` values quantized in `row_groups` fit AMX tiles: each group
    whole 64-byte tile rows, the weight in blocks of a tile's 16 columns."""
    return fits_amx(row_groups(width)[1], 1, block)
