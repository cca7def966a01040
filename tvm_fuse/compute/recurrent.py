"""An LSTM or GRU direction's whole recurrence as one kernel: a loop over time whose every step
takes the hidden state's product with R (a register tile of gate columns at a time), then the
gates' activations and the new states. Written as TIR, not te: a te compute cannot read its
own previous step, so each step would be stages of its own, unrolled, whose build time grows
with the square of the steps. As Relax ops, each step was three or four kernels and their VM
calls and allocations, which took most of a small recurrence's time. One thread: a step is a
few thousand multiply-adds, and on two threads each would wait for a join. (A dynamically
quantized LSTM's integer steps are larger: one direction splits them between the cores.)"""

from __future__ import annotations

import numpy as np
import tvm
from tvm.script import tirx as T

from .dense_int8 import LLVM_INTRINSICS, QUAD, pack_dense_quads
from .fast_math import exp_f32
from .requantize import U8_MAX

LANES = 16  # the widest fp32 vector (LLVM splits it on a narrower ISA)
COLUMN_VECTORS = 5  # vectors of gate columns accumulated in registers together, at most
MAX_ROWS = 2  # batch rows accumulated together, at most (4 spilled: 1.7x slower)


def _sigmoid(x):
    return T.float32(1.0) / (T.float32(1.0) + exp_f32(-x, overflow_to_inf=True))


def _tanh(x):
    return T.float32(2.0) * _sigmoid(x + x) - T.float32(1.0)


def _vector(extent: int) -> int:
    return next(v for v in (LANES, 8, 4, 2, 1) if extent % v == 0)


def _rows(batch: int) -> int:
    """Batch rows sharing each load of R."""
    return next(r for r in range(MAX_ROWS, 0, -1) if batch % r == 0)


def _product(rows: int, hidden: int, columns: int):
    """(a macro, its tile's columns): `product(state, s, row, begin, recurrent, d, gates, sums)`
    sets gates[r, begin + c] = sum_k state[s, row + r, k] * recurrent[d, k, begin + c] for the
    `rows` rows and `columns` columns from `begin`, a tile of vectors at a time accumulated in
    `sums`."""
    vector = _vector(columns)
    tile = next(t for t in range(COLUMN_VECTORS, 0, -1) if (columns // vector) % t == 0)
    span = vector * tile

    @T.macro
    def product(state, s, row, begin, recurrent, d, gates, sums):
        for block in range(columns // span):
            for r in T.unroll(rows):
                for v in T.unroll(tile):
                    for lane in T.vectorized(vector):
                        sums[r, v * vector + lane] = T.float32(0.0)
            for k in range(hidden):
                for r in T.unroll(rows):
                    for v in T.unroll(tile):
                        for lane in T.vectorized(vector):
                            sums[r, v * vector + lane] = (
                                sums[r, v * vector + lane]
                                + state[s, row + r, k] * recurrent[d, k, begin + block * span + v * vector + lane])
            for r in T.unroll(rows):
                for v in T.unroll(tile):
                    for lane in T.vectorized(vector):
                        gates[r, begin + block * span + v * vector + lane] = sums[r, v * vector + lane]

    return product, span


def _time(step, direction, seq: int, reverse: tuple[bool, ...]):
    """The time step a direction computes at loop step `step`: forward, or from the end."""
    if len(reverse) == 2:  # (forward, reverse)
        return step + direction * (seq - 1 - 2 * step)
    return seq - 1 - step if reverse[0] else step


def _lstm_gates(seq: int, hidden: int, rows: int, lanes: int, reverse: tuple[bool, ...]):
    """A macro: `gates(step, d, first, products, recurrent_products, h, c, y)` takes the rows from
    `first * rows` of direction `d` one step on from their products with R (`recurrent_products`
    [rows, 4 * hidden]) and with W (`products`): c, h, and y at the step's time."""
    width = 4 * hidden

    @T.macro
    def gates(step, d, first, products, recurrent_products, h, c, y):
        for r, column in T.grid(rows, hidden // lanes):
            # Index expressions spelled out: TVM's vectorizer mishandled them as lets.
            for lane in T.vectorized(lanes):
                c[d, first * rows + r, column * lanes + lane] = (
                    _sigmoid(recurrent_products[r, 2 * hidden + column * lanes + lane]
                             + products[_time(step, d, seq, reverse), first * rows + r,
                                        d * width + 2 * hidden + column * lanes + lane])
                    * c[d, first * rows + r, column * lanes + lane]
                    + _sigmoid(recurrent_products[r, column * lanes + lane]
                               + products[_time(step, d, seq, reverse), first * rows + r,
                                          d * width + column * lanes + lane])
                    * _tanh(recurrent_products[r, 3 * hidden + column * lanes + lane]
                            + products[_time(step, d, seq, reverse), first * rows + r,
                                       d * width + 3 * hidden + column * lanes + lane]))
            for lane in T.vectorized(lanes):
                h[d, first * rows + r, column * lanes + lane] = (
                    _sigmoid(recurrent_products[r, hidden + column * lanes + lane]
                             + products[_time(step, d, seq, reverse), first * rows + r,
                                        d * width + hidden + column * lanes + lane])
                    * _tanh(c[d, first * rows + r, column * lanes + lane]))
                y[_time(step, d, seq, reverse), d, first * rows + r, column * lanes + lane] = (
                    h[d, first * rows + r, column * lanes + lane])

    return gates


def lstm_sequence(seq: int, batch: int, hidden: int, reverse: tuple[bool, ...]) -> tvm.tirx.PrimFunc:
    """ONNX LSTM's default activations (gates i, o, f, c; sigmoid, tanh, tanh) over a sequence,
    every direction (`reverse`: each runs from the last step to the first or not) on a core of
    its own: (products [seq, batch, directions * 4 * hidden] (x @ W^T and both biases),
    recurrent [directions, hidden, 4 * hidden] (R^T), h0, c0 [directions, batch, hidden]) ->
    (Y [seq, directions, batch, hidden] in time order, the last h, the last c)."""
    directions, width, rows, lanes = len(reverse), 4 * hidden, _rows(batch), _vector(hidden)
    product, span = _product(rows, hidden, width)
    step_gates = _lstm_gates(seq, hidden, rows, lanes, reverse)

    @T.prim_func(private=True, s_tir=True)
    def lstm(products: T.Buffer((seq, batch, directions * width), "float32"),
             recurrent: T.Buffer((directions, hidden, width), "float32"),
             h0: T.Buffer((directions, batch, hidden), "float32"), c0: T.Buffer((directions, batch, hidden), "float32"),
             y: T.Buffer((seq, directions, batch, hidden), "float32"), h: T.Buffer((directions, batch, hidden), "float32"),
             c: T.Buffer((directions, batch, hidden), "float32")):
        T.func_attr({"tirx.noalias": True})
        with T.sblock("root"):  # what tvm_fuse.schedules looks for; it names no schedule rule
            for direction in T.parallel(directions):
                with T.sblock("direction"):  # its buffers are allocated per task
                    d = T.axis.spatial(directions, direction)
                    gates = T.sblock_alloc_buffer((rows, width), "float32")
                    sums = T.sblock_alloc_buffer((rows, span), "float32", scope="local")
                    for b, j in T.grid(batch, hidden):
                        h[d, b, j] = h0[d, b, j]
                        c[d, b, j] = c0[d, b, j]
                    for step, first in T.grid(seq, batch // rows):
                        product(h, d, first * rows, 0, recurrent, d, gates, sums)
                        step_gates(step, d, first, products, gates, h, c, y)

    return lstm


def _state_bounds(batch: int, hidden: int):
    """A macro: `bounds(h, d, bounds)` sets `bounds` to (zero point, scale) of direction `d`'s
    h as ONNX Runtime quantizes it to uint8 (`frontend.dynamic_quantization`): its range
    widened to hold 0 over 255 codes, a scale of 1 where it is 0."""

    @T.macro
    def bounds_of(h, d, bounds):
        bounds[0] = T.float32(0.0)
        bounds[1] = T.float32(0.0)
        for b, j in T.grid(batch, hidden):
            bounds[0] = T.min(bounds[0], h[d, b, j])
            bounds[1] = T.max(bounds[1], h[d, b, j])
        bounds[1] = T.Select(bounds[1] == bounds[0], T.float32(1.0), (bounds[1] - bounds[0]) / T.float32(U8_MAX))
        bounds[0] = T.nearbyint(T.min(T.max(-bounds[0] / bounds[1], T.float32(0.0)), T.float32(U8_MAX)))

    return bounds_of


def _state_code(value, bounds):
    """The uint8 code (as float32) of `value` on `bounds` (`_state_bounds`): rounded half to
    even, then saturated."""
    return T.min(T.max(T.nearbyint(value / bounds[1]) + bounds[0], T.float32(0.0)), T.float32(U8_MAX))


def lstm_quantized_sequence(seq: int, batch: int, hidden: int, reverse: tuple[bool, ...],
                            codes_dtype: str) -> tvm.tirx.PrimFunc:
    """`lstm_sequence` as com.microsoft.DynamicQuantizeLSTM computes it: each step quantizes the
    previous h of its direction to uint8 with its own range, as ONNX Runtime does (see
    `frontend.dynamic_quantization`: the range widened to hold 0 over 255 codes, a scale of 1
    where it is 0, each value rounded half to even and saturated), and takes the integer
    product of the codes less their zero point with R's codes, scaled by the two scales:
    (products, recurrent [directions, 4 * hidden, hidden] R's codes less their zero point
    (`codes_dtype` int8 or int16), recurrent_scale [directions, 4 * hidden], h0, c0) -> as
    `lstm_sequence`. The products are exact in int32; LLVM makes them `vpmaddwd`s. One
    direction's take every core, its columns split between them at each step."""
    directions, width, rows, lanes = len(reverse), 4 * hidden, _rows(batch), _vector(hidden)
    step_gates = _lstm_gates(seq, hidden, rows, lanes, reverse)
    state_bounds = _state_bounds(batch, hidden)
    direction_loop, column_loop = (T.parallel, T.serial) if directions > 1 else (T.serial, T.parallel)

    @T.prim_func(private=True, s_tir=True)
    def lstm(products: T.Buffer((seq, batch, directions * width), "float32"),
             recurrent: T.Buffer((directions, width, hidden), codes_dtype),
             recurrent_scale: T.Buffer((directions, width), "float32"),
             h0: T.Buffer((directions, batch, hidden), "float32"), c0: T.Buffer((directions, batch, hidden), "float32"),
             y: T.Buffer((seq, directions, batch, hidden), "float32"), h: T.Buffer((directions, batch, hidden), "float32"),
             c: T.Buffer((directions, batch, hidden), "float32")):
        T.func_attr({"tirx.noalias": True})
        with T.sblock("root"):  # what tvm_fuse.schedules looks for; it names no schedule rule
            for direction in direction_loop(directions):
                with T.sblock("direction"):  # its buffers are allocated per task
                    d = T.axis.spatial(directions, direction)
                    gates = T.sblock_alloc_buffer((rows, width), "float32")
                    sums = T.sblock_alloc_buffer((rows, width), "int32")
                    state = T.sblock_alloc_buffer((batch, hidden), "int16")  # h's codes less their zero point
                    bounds = T.sblock_alloc_buffer((2,), "float32", scope="local")  # its zero point, scale
                    for b, j in T.grid(batch, hidden):
                        h[d, b, j] = h0[d, b, j]
                        c[d, b, j] = c0[d, b, j]
                    for step in range(seq):
                        state_bounds(h, d, bounds)
                        for b, j in T.grid(batch, hidden):
                            state[b, j] = T.Cast("int16", _state_code(h[d, b, j], bounds) - bounds[0])
                        for first in range(batch // rows):
                            for column in column_loop(width):
                                for r in range(rows):
                                    sums[r, column] = 0
                                    for k in range(hidden):
                                        sums[r, column] = sums[r, column] + (
                                            T.Cast("int32", state[first * rows + r, k]) * T.Cast("int32", recurrent[d, column, k]))
                                    gates[r, column] = T.Cast("float32", sums[r, column]) * (
                                        bounds[1] * recurrent_scale[d, column])
                            step_gates(step, d, first, products, gates, h, c, y)

    return lstm


VNNI_LANES = 16  # s32 lanes of a zmm `vpdpbusd`
VNNI_ACCUMULATORS = 16  # zmm accumulators of a step's register tile, at most


def pack_recurrent_quads(codes: np.ndarray) -> np.ndarray:
    """R's s8 codes [directions, 4 * hidden, hidden] as `lstm_vnni_sequence` reads them:
    [directions, 4 * hidden / 16, hidden / 4, 16, 4], per direction `pack_dense_quads`."""
    return np.stack([pack_dense_quads(np.ascontiguousarray(direction.T), VNNI_LANES) for direction in codes])


def lstm_vnni_sequence(seq: int, batch: int, hidden: int, reverse: tuple[bool, ...]) -> tvm.tirx.PrimFunc:
    """`lstm_quantized_sequence` (R's codes s8, about a zero point of 0) on AVX512-VNNI: each
    step's h codes (uint8, four to a word) times R's codes packed by `pack_recurrent_quads`,
    summed in s32 by `vpdpbusd` on a register tile of gate columns, less the codes' zero point
    times each column's code sum (exact in s32, as ONNX Runtime sums it): (products, packed,
    column_sums [directions, 4 * hidden] (s32), recurrent_scale, h0, c0) -> as
    `lstm_sequence`. `hidden` a multiple of 4."""
    directions, width, rows, lanes = len(reverse), 4 * hidden, _rows(batch), _vector(hidden)
    blocks, quads = width // VNNI_LANES, hidden // QUAD
    tile = next(t for t in (8, 4, 2, 1) if blocks % t == 0 and rows * t <= VNNI_ACCUMULATORS)
    step_gates = _lstm_gates(seq, hidden, rows, lanes, reverse)
    state_bounds = _state_bounds(batch, hidden)
    direction_loop, tile_loop = (T.parallel, T.serial) if directions > 1 else (T.serial, T.parallel)
    vpdpbusd = LLVM_INTRINSICS[VNNI_LANES][0]
    acc_type, bytes_type = f"int32x{VNNI_LANES}", f"uint8x{QUAD * VNNI_LANES}"

    @T.prim_func(private=True, s_tir=True)
    def lstm(products: T.Buffer((seq, batch, directions * width), "float32"),
             packed: T.Buffer((directions, blocks, quads, VNNI_LANES, QUAD), "int8"),
             column_sums: T.Buffer((directions, width), "int32"),
             recurrent_scale: T.Buffer((directions, width), "float32"),
             h0: T.Buffer((directions, batch, hidden), "float32"), c0: T.Buffer((directions, batch, hidden), "float32"),
             y: T.Buffer((seq, directions, batch, hidden), "float32"), h: T.Buffer((directions, batch, hidden), "float32"),
             c: T.Buffer((directions, batch, hidden), "float32")):
        T.func_attr({"tirx.noalias": True})
        with T.sblock("root"):  # what tvm_fuse.schedules looks for; it names no schedule rule
            for direction in direction_loop(directions):
                with T.sblock("direction"):  # its buffers are allocated per task
                    d = T.axis.spatial(directions, direction)
                    gates = T.sblock_alloc_buffer((rows, width), "float32")
                    words = T.sblock_alloc_buffer((batch, quads), "uint32")  # h's codes, four to a word
                    bounds = T.sblock_alloc_buffer((2,), "float32", scope="local")  # its zero point, scale
                    for b, j in T.grid(batch, hidden):
                        h[d, b, j] = h0[d, b, j]
                        c[d, b, j] = c0[d, b, j]
                    for step in range(seq):
                        state_bounds(h, d, bounds)
                        for b, q in T.grid(batch, quads):
                            words[b, q] = (T.Cast("uint32", _state_code(h[d, b, q * QUAD], bounds))
                                           | T.shift_left(T.Cast("uint32", _state_code(h[d, b, q * QUAD + 1], bounds)), T.uint32(8))
                                           | T.shift_left(T.Cast("uint32", _state_code(h[d, b, q * QUAD + 2], bounds)), T.uint32(16))
                                           | T.shift_left(T.Cast("uint32", _state_code(h[d, b, q * QUAD + 3], bounds)), T.uint32(24)))
                        for first in range(batch // rows):
                            for group in tile_loop(blocks // tile):
                                with T.sblock("tile"):  # its accumulators are allocated per task
                                    g = T.axis.spatial(blocks // tile, group)
                                    e = T.axis.spatial(directions, d)
                                    f = T.axis.spatial(batch // rows, first)
                                    acc = T.sblock_alloc_buffer((rows, tile * VNNI_LANES), "int32", scope="local")
                                    for r, t in T.grid(rows, tile):
                                        acc[r, T.ramp(t * VNNI_LANES, 1, VNNI_LANES)] = T.broadcast(T.int32(0), VNNI_LANES)
                                    for q in range(quads):
                                        for r in T.unroll(rows):
                                            for t in T.unroll(tile):
                                                acc[r, T.ramp(t * VNNI_LANES, 1, VNNI_LANES)] = T.call_llvm_pure_intrin(
                                                    T.llvm_lookup_intrinsic_id(vpdpbusd),
                                                    acc[r, T.ramp(t * VNNI_LANES, 1, VNNI_LANES)],
                                                    T.reinterpret(T.broadcast(T.reinterpret(words[f * rows + r, q], dtype="int32"),
                                                                              VNNI_LANES), dtype=bytes_type),
                                                    packed.vload([e, g * tile + t, q, 0, 0], dtype=f"int8x{QUAD * VNNI_LANES}"),
                                                    dtype=acc_type)
                                    for r, t in T.grid(rows, tile):
                                        for lane in T.vectorized(VNNI_LANES):
                                            gates[r, (g * tile + t) * VNNI_LANES + lane] = T.Cast(
                                                "float32", acc[r, t * VNNI_LANES + lane] - T.Cast("int32", bounds[0])
                                                * column_sums[e, (g * tile + t) * VNNI_LANES + lane]) * (
                                                bounds[1] * recurrent_scale[e, (g * tile + t) * VNNI_LANES + lane])
                            step_gates(step, d, first, products, gates, h, c, y)

    return lstm


def gru_sequence(seq: int, batch: int, hidden: int, reverse: tuple[bool, ...],
                 linear_before_reset: bool) -> tvm.tirx.PrimFunc:
    """ONNX GRU's default activations (gates z, r, h; sigmoid, tanh) over a sequence, every
    direction on a core of its own: (products [seq, batch, directions * 3 * hidden] (x @ W^T and
    W's bias), recurrent [directions, hidden, 3 * hidden] (R^T), recurrent_bias [directions,
    3 * hidden], h0 [directions, batch, hidden]) -> (Y [seq, directions, batch, hidden] in time
    order, the last h). `linear_before_reset`: the reset gate scales the candidate's recurrent
    product (else the state before the product)."""
    directions, width, rows, lanes = len(reverse), 3 * hidden, _rows(batch), _vector(hidden)
    if linear_before_reset:
        product, span = _product(rows, hidden, width)
    else:
        product, span = _product(rows, hidden, 2 * hidden)
        candidate_product, candidate_span = _product(rows, hidden, hidden)
        span = max(span, candidate_span)

    @T.prim_func(private=True, s_tir=True)
    def gru(products: T.Buffer((seq, batch, directions * width), "float32"),
            recurrent: T.Buffer((directions, hidden, width), "float32"),
            recurrent_bias: T.Buffer((directions, width), "float32"), h0: T.Buffer((directions, batch, hidden), "float32"),
            y: T.Buffer((seq, directions, batch, hidden), "float32"), h: T.Buffer((directions, batch, hidden), "float32")):
        T.func_attr({"tirx.noalias": True})
        with T.sblock("root"):  # what tvm_fuse.schedules looks for; it names no schedule rule
            for direction in T.parallel(directions):
                with T.sblock("direction"):  # its buffers are allocated per task
                    d = T.axis.spatial(directions, direction)
                    gates = T.sblock_alloc_buffer((rows, width), "float32")
                    sums = T.sblock_alloc_buffer((rows, span), "float32", scope="local")
                    reset = T.sblock_alloc_buffer((1, rows, hidden), "float32")  # r * h, without linear_before_reset
                    candidate = T.sblock_alloc_buffer((rows, hidden), "float32")
                    for b, j in T.grid(batch, hidden):
                        h[d, b, j] = h0[d, b, j]
                    for step, first in T.grid(seq, batch // rows):
                        product(h, d, first * rows, 0, recurrent, d, gates, sums)
                        if not linear_before_reset:
                            for r, column in T.grid(rows, hidden // lanes):
                                for lane in T.vectorized(lanes):
                                    reset[0, r, column * lanes + lane] = _sigmoid(
                                        gates[r, hidden + column * lanes + lane]
                                        + recurrent_bias[d, hidden + column * lanes + lane]
                                        + products[_time(step, d, seq, reverse), first * rows + r,
                                                   d * width + hidden + column * lanes + lane]
                                    ) * h[d, first * rows + r, column * lanes + lane]
                            candidate_product(reset, 0, 0, 2 * hidden, recurrent, d, gates, sums)
                        for r, column in T.grid(rows, hidden // lanes):
                            for lane in T.vectorized(lanes):
                                candidate[r, column * lanes + lane] = _tanh(
                                    products[_time(step, d, seq, reverse), first * rows + r,
                                             d * width + 2 * hidden + column * lanes + lane]
                                    + (_sigmoid(gates[r, hidden + column * lanes + lane]
                                                + recurrent_bias[d, hidden + column * lanes + lane]
                                                + products[_time(step, d, seq, reverse), first * rows + r,
                                                           d * width + hidden + column * lanes + lane])
                                       if linear_before_reset else T.float32(1.0))
                                    * (gates[r, 2 * hidden + column * lanes + lane]
                                       + recurrent_bias[d, 2 * hidden + column * lanes + lane]))
                            for lane in T.vectorized(lanes):  # (1 - z) * candidate + z * h
                                h[d, first * rows + r, column * lanes + lane] = (
                                    candidate[r, column * lanes + lane]
                                    + _sigmoid(gates[r, column * lanes + lane] + recurrent_bias[d, column * lanes + lane]
                                               + products[_time(step, d, seq, reverse), first * rows + r,
                                                          d * width + column * lanes + lane])
                                    * (h[d, first * rows + r, column * lanes + lane] - candidate[r, column * lanes + lane]))
                                y[_time(step, d, seq, reverse), d, first * rows + r, column * lanes + lane] = (
                                    h[d, first * rows + r, column * lanes + lane])

    return gru
