"""Winograd F(m x m, 3 x 3) convolution in the blocked layout NCHW{c}c.

Each m x m tile of outputs comes from an (m+2) x (m+2) tile of inputs in three stages: the
input tile transformed (B^T d B), one matrix product per tile position over the input
channels with the transformed weights (G g G^T, computed once at build time), and the product
transformed back (A^T M A). F(4x4, 3x3) does 4x fewer multiplications than the direct conv in
the product, at the cost of the two transforms. The transform matrices are TOPI's (its
interpolation points minimise the fp32 error). Each transform is two stages (rows, then columns) of explicit sums of
their nonzero terms, selected by tile position, so that once the schedule unrolls the
position only those terms remain.
"""

from __future__ import annotations

import functools

import numpy as np
import tvm
from tvm import te, topi
from tvm.topi.nn.winograd_util import _cook_toom_convolution, _interpolation_points

from ..ir_names import SCHEDULE_RULE, WINOGRAD_NCHWC_RULE
from .bf16 import BITS, from_bits

KERNEL = 3
# (smallest output side, tile m): F(4x4) from 12x12, F(2x2) from 6x6 (7x7 stages included, whose
# transformed weights, 16/9 of the direct conv's, stream in behind the product since the
# Winograd tiles prefetch the next group's weights), measured per kernel in the CNNs
# (performance log).
TILE_BY_OUTPUT_SIDE = ((12, 4), (6, 2))
# Winograd saves work in the reduction over input channels, while its transforms cost as much
# per channel and tile whatever the reduction: below this many input channels (an RGB stem) the
# direct conv was faster (docs/performance-log.md).
MIN_INPUT_CHANNELS = 8


def choose_tile(out_h: int, out_w: int, table=TILE_BY_OUTPUT_SIDE) -> int | None:
    """The Winograd tile for a 3x3 conv with this output size, or None for the direct conv."""
    return next((tile for side, tile in table if min(out_h, out_w) >= side), None)


@functools.cache  # TOPI derives them by polynomial arithmetic, and every stage of every Winograd conv asks
def transform_matrices(tile: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A (alpha x m), B (alpha x alpha), G (alpha x 3) of F(m, 3), alpha = m + 2 (read-only)."""
    points = _interpolation_points(tile + KERNEL - 2)
    matrices = _cook_toom_convolution(points, tile, KERNEL)
    for matrix in matrices:
        matrix.setflags(write=False)
    return matrices


def transform_weight(weight: np.ndarray, tile: int) -> np.ndarray:
    """OIHW{c}i{c}o 3x3 weights as [alpha, alpha, O, I, {c}i, {c}o]: G g G^T per tile position."""
    _, _, g = transform_matrices(tile)
    return np.einsum("ek,vl,oiklab->evoiab", g, g, weight.astype(np.float64)).astype(weight.dtype)


def conv2d_winograd_nchwc(data: te.Tensor, weight: te.Tensor, padding, tile: int) -> te.Tensor:
    """The stride-1, undilated 3x3 `conv2d_nchwc` with weights from `transform_weight`."""
    inputs = winograd_input(data, padding, tile)
    alpha, _, batch, in_chunks, tiles, in_block = inputs.shape
    ic = te.reduce_axis((0, in_chunks), name="ic")
    ib = te.reduce_axis((0, in_block), name="ib")
    product = te.compute(
        (alpha, alpha, batch, weight.shape[2], tiles, weight.shape[5]),
        lambda eps, nu, n, oc, t, ob: te.sum(inputs[eps, nu, n, ic, t, ib] * weight[eps, nu, oc, ic, ib, ob], axis=[ic, ib]),
        name="winograd_product", attrs={SCHEDULE_RULE: WINOGRAD_NCHWC_RULE})
    return winograd_output(product, data, padding, tile)


def _geometry(data: te.Tensor, padding, tile: int) -> tuple[int, int, int, int]:
    """(out_h, out_w, tiles_h, tiles_w) of the conv of `data`."""
    top, left, bottom, right = padding
    out_h, out_w = int(data.shape[2]) + top + bottom - KERNEL + 1, int(data.shape[3]) + left + right - KERNEL + 1
    return out_h, out_w, -(-out_h // tile), -(-out_w // tile)


def winograd_input(data: te.Tensor, padding, tile: int, store=lambda value: value) -> te.Tensor:
    """B^T d B of every tile of `data`, [alpha, alpha, N, C/c, tiles, c], each value as `store`
    writes it. `data` may be bf16 bits, widened as they are read."""
    _, b_matrix, _ = transform_matrices(tile)
    batch, in_chunks, height, width, in_block = (int(d) if isinstance(d, tvm.tirx.IntImm) else d for d in data.shape)
    top, left, *_ = padding
    _, _, tiles_h, tiles_w = _geometry(data, padding, tile)
    # Pad past the bottom and right edges so every tile's input window is inside.
    padded = topi.nn.pad(data, [0, 0, top, left, 0],
                         [0, 0, tiles_h * tile + 2 - height - top, tiles_w * tile + 2 - width - left, 0], name="pad")
    value = (lambda index: from_bits(padded[index])) if data.dtype == BITS else padded.__getitem__

    # Each transform is separable: rows first, then columns.
    def input_rows(eps, b, n, ic, t, ib):
        y, x = (t // tiles_w) * tile, (t % tiles_w) * tile
        return _combination(b_matrix, eps, lambda a: value((n, ic, y + a, x + b, ib)))

    alpha = tile + KERNEL - 1
    shape = (alpha, alpha, batch, in_chunks, tiles_h * tiles_w, in_block)
    rows = te.compute(shape, input_rows, name="winograd_input_rows")
    return te.compute(shape, lambda eps, nu, n, ic, t, ib: store(
        _combination(b_matrix, nu, lambda b: rows[eps, b, n, ic, t, ib])), name="winograd_input")


def winograd_output(product: te.Tensor, data: te.Tensor, padding, tile: int) -> te.Tensor:
    """A^T M A of the tile products `product` ([alpha, alpha, N, O/c, tiles, c]): the conv of
    `data` in NCHW{c}c."""
    a_matrix, _, _ = transform_matrices(tile)
    alpha, _, batch, out_chunks, _, out_block = product.shape
    out_h, out_w, tiles_h, tiles_w = _geometry(data, padding, tile)
    out_rows = te.compute(
        (batch, out_chunks, tiles_h, tiles_w, tile, alpha, out_block),
        lambda n, oc, ty, tx, vh, b, ob: _combination(a_matrix, vh, lambda a: product[a, b, n, oc, ty * tiles_w + tx, ob]),
        name="winograd_output_rows")
    outputs = te.compute(
        (batch, out_chunks, tiles_h, tiles_w, tile, tile, out_block),
        lambda n, oc, ty, tx, vh, vw, ob: _combination(a_matrix, vw, lambda b: out_rows[n, oc, ty, tx, vh, b, ob]),
        name="winograd_output")
    return te.compute((batch, out_chunks, out_h, out_w, out_block),
                      lambda n, oc, y, x, ob: outputs[n, oc, y // tile, x // tile, y % tile, x % tile, ob],
                      name="conv")


def _combination(matrix: np.ndarray, column, element):
    """sum over a of matrix[a, column] * element(a), for the constant `column` it equals: a
    chain of selects that folds away once `column` is unrolled, each branch with only the
    nonzero terms."""

    def terms(c: int):
        total = None
        for a, coefficient in enumerate(float(v) for v in matrix[:, c]):
            if coefficient == 0.0:
                continue
            value = element(a)
            term = value if coefficient == 1.0 else -value if coefficient == -1.0 else value * coefficient
            total = term if total is None else total + term
        return total

    result = terms(matrix.shape[1] - 1)
    for c in reversed(range(matrix.shape[1] - 1)):
        result = tvm.tirx.Select(column == c, terms(c), result)
    return result
