"""An LSTM direction's whole recurrence as one kernel: a loop over time whose every step takes
the hidden state's product with R (a register tile of gate columns at a time), then the gates'
activations and the new cell and hidden states. Written as TIR, not te: a te compute cannot
read its own previous step, so each step would be stages of its own, unrolled, whose build
time grows with the square of the steps. As Relax ops, each step was three kernels (dense, c,
h) and their VM calls and allocations, which took most of a small LSTM's time."""

from __future__ import annotations

import tvm
from tvm.script import tirx as T

from .fast_math import exp_f32

LANES = 16  # the gate columns' vector (LLVM splits it on a narrower ISA)
COLUMN_VECTORS = 5  # vectors of gate columns accumulated in registers together, at most
MAX_ROWS = 2  # batch rows accumulated together, at most (4 spilled: 1.7x slower)


def _sigmoid(x):
    return T.float32(1.0) / (T.float32(1.0) + exp_f32(-x, overflow_to_inf=True))


def _tanh(x):
    return T.float32(2.0) * _sigmoid(x + x) - T.float32(1.0)


def lstm_sequence(seq: int, batch: int, hidden: int, reverse: bool) -> tvm.tirx.PrimFunc:
    """ONNX LSTM's default activations (gates i, o, f, c; sigmoid, tanh, tanh) over a sequence:
    (products [seq, batch, 4 * hidden] (x @ W^T and both biases), recurrent [hidden, 4 * hidden]
    (R^T), h0, c0 [batch, hidden]) -> (Y [seq, batch, hidden] in time order, the last h, the
    last c). `reverse` runs from the last step to the first. One thread: a step is a few
    thousand multiply-adds, and on two threads each would wait for a join."""
    width = 4 * hidden
    vector = next(v for v in (LANES, 8, 4, 2, 1) if width % v == 0)
    rows = next(r for r in range(MAX_ROWS, 0, -1) if batch % r == 0)  # batch rows sharing each load of R
    tile = next(t for t in range(COLUMN_VECTORS, 0, -1) if (width // vector) % t == 0)
    span = vector * tile
    state_vector = next(v for v in (LANES, 8, 4, 2, 1) if hidden % v == 0)

    @T.prim_func(private=True, s_tir=True)
    def lstm(products: T.Buffer((seq, batch, width), "float32"), recurrent: T.Buffer((hidden, width), "float32"),
             h0: T.Buffer((batch, hidden), "float32"), c0: T.Buffer((batch, hidden), "float32"),
             y: T.Buffer((seq, batch, hidden), "float32"), h: T.Buffer((batch, hidden), "float32"),
             c: T.Buffer((batch, hidden), "float32")):
        T.func_attr({"tirx.noalias": True})
        with T.sblock("root"):  # what tvm_fuse.schedules looks for; it names no schedule rule
            gates = T.sblock_alloc_buffer((rows, width), "float32")
            sums = T.sblock_alloc_buffer((rows, span), "float32", scope="local")
            for b, j in T.grid(batch, hidden):
                h[b, j] = h0[b, j]
                c[b, j] = c0[b, j]
            for step in range(seq):
                for first in range(batch // rows):
                    for block in range(width // span):
                        for r in T.unroll(rows):
                            for v in T.unroll(tile):
                                for lane in T.vectorized(vector):
                                    sums[r, v * vector + lane] = products[(seq - 1 - step) if reverse else step,
                                                                          first * rows + r, block * span + v * vector + lane]
                        for k in range(hidden):
                            for r in T.unroll(rows):
                                for v in T.unroll(tile):
                                    for lane in T.vectorized(vector):
                                        sums[r, v * vector + lane] = (
                                            sums[r, v * vector + lane]
                                            + h[first * rows + r, k] * recurrent[k, block * span + v * vector + lane])
                        for r in T.unroll(rows):
                            for v in T.unroll(tile):
                                for lane in T.vectorized(vector):
                                    gates[r, block * span + v * vector + lane] = sums[r, v * vector + lane]
                    for r, column in T.grid(rows, hidden // state_vector):
                        for lane in T.vectorized(state_vector):
                            c[first * rows + r, column * state_vector + lane] = (
                                _sigmoid(gates[r, 2 * hidden + column * state_vector + lane])
                                * c[first * rows + r, column * state_vector + lane]
                                + _sigmoid(gates[r, column * state_vector + lane])
                                * _tanh(gates[r, 3 * hidden + column * state_vector + lane]))
                        for lane in T.vectorized(state_vector):
                            h[first * rows + r, column * state_vector + lane] = (
                                _sigmoid(gates[r, hidden + column * state_vector + lane])
                                * _tanh(c[first * rows + r, column * state_vector + lane]))
                            y[(seq - 1 - step) if reverse else step, first * rows + r, column * state_vector + lane] = (
                                h[first * rows + r, column * state_vector + lane])

    return lstm
