"""An LSTM direction's whole recurrence as one kernel: every step's product of the hidden state
with R, its gates and the new cell and hidden states, the loop over time unrolled inside the
kernel (`schedules.recurrent`). As Relax ops, each step was three kernels (dense, c, h) and
their VM calls and allocations, which took most of a small LSTM's time: a CRNN's 32-wide
BiLSTMs did 4K multiply-adds per step."""

from __future__ import annotations

from tvm import te, tirx, topi

from . import SCHEDULE_RULE
from .fast_math import sigmoid

LSTM_RULE = "tvm_fuse.lstm"


def lstm_sequence(products: te.Tensor, recurrent: te.Tensor, h0: te.Tensor, c0: te.Tensor, reverse: bool):
    """ONNX LSTM's default activations (gates i, o, f, c; sigmoid, tanh, tanh) over a sequence:
    `products` [seq, batch, 4 * hidden] (x @ W^T and both biases), `recurrent` [hidden,
    4 * hidden] (R^T), initial states [batch, hidden] -> (Y [seq, batch, hidden] in time order,
    the last h, the last c). `reverse` runs from the last step to the first."""
    seq, batch, width = (int(d) for d in products.shape)
    hidden = width // 4
    h, c = h0, c0
    hs = {}
    for step in range(seq):
        t = seq - 1 - step if reverse else step
        k = te.reduce_axis((0, hidden), name="k")
        sums = te.compute((batch, width), lambda b, j: te.sum(h[b, k] * recurrent[k, j], axis=k),
                          name=f"recurrent{step}", attrs={SCHEDULE_RULE: LSTM_RULE})
        gates = te.compute((batch, width), lambda b, j: products[t, b, j] + sums[b, j], name="gates")
        # Both activations over all four gates: fewer stages for the schedule to inline (its
        # time grows with their count times the kernel's size), for arithmetic the product's.
        sigmoids, tanhs = sigmoid(gates), topi.fast_tanh(gates)
        i, o, f, cell = (lambda b, j, g=g: (sigmoids if g < 3 else tanhs)[b, g * hidden + j] for g in range(4))
        c = te.compute((batch, hidden), lambda b, j: f(b, j) * c[b, j] + i(b, j) * cell(b, j), name=f"c{step}")
        c_activated = topi.fast_tanh(c)
        h = te.compute((batch, hidden), lambda b, j: o(b, j) * c_activated[b, j], name=f"h{step}")
        hs[t] = h

    def y(t, b, j):  # a select per step: the schedule unrolls t, which leaves one
        value = hs[seq - 1][b, j]
        for s in range(seq - 2, -1, -1):
            value = tirx.Select(t == s, hs[s][b, j], value)
        return value

    return te.compute((seq, batch, hidden), y, name="y"), h, c
