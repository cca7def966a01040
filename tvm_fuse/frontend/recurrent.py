"""ONNX LSTM and GRU as Relax: the loop over time unrolled around dense products.

TVM 0.27's importer has no LSTM or GRU. Here the input's product with the gate weights is one
matmul over the whole sequence (an LSTM's two biases added to it once), and each step adds the
hidden state's product (a dense layer on [batch, hidden]) and the gates' elementwise math,
which reads the gates as slices of the product, so that TVM fuses them into the elementwise
kernels of the step (an LSTM's step: the dense layer, then a kernel for c and one for h).
The sequence length must be known at build time (`input_shapes`); every direction, initial
states, biases, LSTM peepholes, `clip`, GRU's `linear_before_reset`, `layout` 0 and 1, and the
activations of `ACTIVATIONS` follow the ONNX spec; `sequence_lens` must equal the sequence length.
A small LSTM or GRU with the default activations, no peepholes and no clip is instead one kernel
over the whole sequence (`compute.recurrent`), each direction on a core of its own, its steps a
few thousand multiply-adds each, which as separate kernels cost more in calls and allocations
than in arithmetic; so is a dynamically quantized LSTM of any size, whose kernel quantizes the
state itself and multiplies integer codes.
"""

from __future__ import annotations

import numpy as np
import tvm
from tvm import relax
from tvm.ir.expr import GenericConst

from ..compute.recurrent import gru_sequence, lstm_quantized_sequence, lstm_sequence
from ..ir_names import KERNEL_ATTR, OP_PATTERN_ATTR, OPAQUE, REVERSE_ATTR
from .attributes import text

ACTIVATIONS = {
    "sigmoid": relax.op.sigmoid,
    "tanh": relax.op.tanh,
    "relu": relax.op.nn.relu,
}
# Multiply-adds of a step's product with R (batch x hidden x 4 hidden) up to which an LSTM
# direction runs as one kernel, on one thread; larger steps are dense layers in parallel.
SEQUENCE_KERNEL_MAX_STEP = 131_072


def _activations(attrs, defaults: list[str], directions: int) -> list:
    names = [text(a).lower() for a in attrs.get("activations", [])] or defaults * directions
    unknown = sorted(set(names) - set(ACTIVATIONS))
    if unknown:
        raise NotImplementedError(f"activations {unknown} (supported: {sorted(ACTIVATIONS)})")
    return [ACTIVATIONS[n] for n in names]


def _index(tensor, index: int):
    """`tensor[index]` along axis 0: a direction's weights or state, a step of a sequence."""
    return relax.op.squeeze(relax.op.strided_slice(tensor, axes=[0], begin=[index], end=[index + 1]), axis=[0])


def _columns(expr, begin: int, end: int):
    """Columns `begin` to `end` of `expr` [batch, columns], a slice not bound: TVM fuses it into
    the elementwise kernel that reads it, where a split is a kernel of its own (and a tuple)."""
    return relax.op.strided_slice(expr, axes=[1], begin=[begin], end=[end])


def _gates(expr, count: int, size: int) -> list:
    """The `count` gates of `expr` [batch, count * size]."""
    return [_columns(expr, k * size, (k + 1) * size) for k in range(count)]


def _stacked(tensors, axis: int):
    return relax.op.concat([relax.op.expand_dims(t, axis) for t in tensors], axis=axis)


class _Recurrence:
    """What LSTM and GRU share: reading inputs and attributes, and assembling the outputs."""

    def __init__(self, bb, inputs, attrs, gates: int):
        self.bb = bb
        x, self.w, self.r = inputs[:3]
        optional = list(inputs[3:]) + [None] * 5
        self.bias, lengths, self.h0 = optional[0], optional[1], optional[2]
        self.rest = optional[3:]
        self.input_scale = None  # x @ W^T's scale per direction and column, where x and W are codes
        self.hidden = int(attrs["hidden_size"])
        self.batch_first = int(attrs.get("layout", 0)) == 1
        self.x = bb.emit(relax.op.permute_dims(x, [1, 0, 2])) if self.batch_first else x
        self.clip = attrs.get("clip")
        self.gates = gates
        direction = text(attrs.get("direction", "forward"))
        self.reverse = {"forward": [False], "reverse": [True], "bidirectional": [False, True]}[direction]
        seq = self.x.ty.shape[0]
        if not isinstance(seq, tvm.tirx.IntImm):
            raise NotImplementedError("a sequence length computed at run time (give it with input_shapes)")
        self.seq = int(seq)
        self.batch = self.x.ty.shape[1]
        if lengths is not None:
            if not isinstance(lengths, GenericConst) or not (lengths.value.numpy() == self.seq).all():
                raise NotImplementedError("sequence_lens other than the whole sequence")

    def emit(self, expr):
        return self.bb.emit(expr)

    def input_products(self, d: int, recurrent_bias: bool = False):
        """x @ W[d]^T (+ W's bias, and R's with `recurrent_bias`) for every step at once:
        [seq, batch, gates * hidden]."""
        products = relax.op.matmul(self.x, relax.op.permute_dims(_index(self.w, d)))
        if self.input_scale is not None:
            products = relax.op.multiply(self.emit(products), _index(self.input_scale, d))
        if self.bias is not None:
            bias = relax.op.strided_slice(_index(self.bias, d), axes=[0], begin=[0], end=[self.gates * self.hidden])
            if recurrent_bias:
                bias = relax.op.add(bias, self.recurrent_bias(d))
            products = relax.op.add(products, bias)
        return self.emit(products)

    def recurrent_bias(self, d: int):
        if self.bias is None:
            return None
        size = self.gates * self.hidden
        return self.emit(relax.op.strided_slice(_index(self.bias, d), axes=[0], begin=[size], end=[2 * size]))

    def initial(self, state, d: int):
        """Direction `d`'s initial state (zeros if not given): [batch, hidden]."""
        return self.emit(_index(self.all_initial(state), d))

    def clipped(self, expr):
        return relax.op.clip(expr, -float(self.clip), float(self.clip)) if self.clip is not None else expr

    def steps(self, d: int):
        order = range(self.seq)
        return reversed(order) if self.reverse[d] else order

    def sequence_kernel(self, func: tvm.tirx.PrimFunc, name: str, args: list, states: int):
        """Every direction's kernel `func` (`compute.recurrent`) called on `args`: the ONNX
        outputs, Y and the `states` final states."""
        batch, directions = int(self.batch), len(self.reverse)
        shapes = [[self.seq, directions, batch, self.hidden]] + [[directions, batch, self.hidden]] * states
        attrs = {KERNEL_ATTR: name, OP_PATTERN_ATTR: OPAQUE, REVERSE_ATTR: [int(r) for r in self.reverse]}
        kernel_func = self.bb.add_func(func.with_attrs(attrs), name)
        kernel = self.emit(relax.call_tir(kernel_func, args, [relax.TensorType(shape, "float32") for shape in shapes]))
        y, *finals = [self.emit(relax.TupleGetItem(kernel, i)) for i in range(1 + states)]
        return self.onnx_outputs(y, finals)

    def all_input_products(self, recurrent_bias: bool = False):
        """x @ W^T of every direction side by side (+ W's bias, and R's with `recurrent_bias`)
        for every step at once: [seq, batch, directions * gates * hidden]."""
        size = self.gates * self.hidden
        weights = self.emit(relax.op.reshape(self.w, [len(self.reverse) * size, -1]))
        products = relax.op.matmul(self.x, relax.op.permute_dims(weights))
        if self.input_scale is not None:
            products = relax.op.multiply(self.emit(products), relax.op.reshape(self.input_scale, [-1]))
        if self.bias is not None:
            bias = relax.op.strided_slice(self.bias, axes=[1], begin=[0], end=[size])
            if recurrent_bias:
                bias = relax.op.add(bias, relax.op.strided_slice(self.bias, axes=[1], begin=[size], end=[2 * size]))
            products = relax.op.add(products, relax.op.reshape(self.emit(bias), [-1]))
        return self.emit(products)

    def all_recurrent(self):
        """R^T of every direction: [directions, hidden, gates * hidden]."""
        return self.emit(relax.op.permute_dims(self.r, [0, 2, 1]))

    def all_recurrent_bias(self):
        """R's bias of every direction (zeros without a bias): [directions, gates * hidden]."""
        size = self.gates * self.hidden
        if self.bias is None:
            return relax.const(np.zeros((len(self.reverse), size), "float32"))
        return self.emit(relax.op.strided_slice(self.bias, axes=[1], begin=[size], end=[2 * size]))

    def all_initial(self, state):
        """Every direction's initial state (zeros if not given): [directions, batch, hidden]."""
        if state is None:
            shape = relax.ShapeExpr([len(self.reverse), self.batch, self.hidden])
            return self.emit(relax.op.zeros(shape, str(self.x.ty.dtype)))
        return self.emit(relax.op.permute_dims(state, [1, 0, 2]) if self.batch_first else state)  # from [batch, directions, hidden]

    def sequence(self, hs: list):
        """A direction's per-step hidden states in time order as [seq, batch, hidden]."""
        return self.emit(_stacked(hs, 0))

    def outputs(self, sequences: list, finals: list[list]):
        """Y [seq, directions, batch, hidden] and each final state [directions, batch, hidden]
        (batch first when `layout` is 1), from each direction's hidden states [seq, batch,
        hidden] and its final states."""
        return self.onnx_outputs(_stacked(sequences, 1), [_stacked(list(state), 0) for state in zip(*finals)])

    def onnx_outputs(self, y, states: list):
        """Y [seq, directions, batch, hidden] and the final states [directions, batch, hidden]
        as ONNX's outputs: batch first when `layout` is 1."""
        if self.batch_first:
            y = relax.op.permute_dims(y, [2, 0, 1, 3])
            states = [relax.op.permute_dims(s, [1, 0, 2]) for s in states]
        return relax.Tuple([self.emit(y)] + [self.emit(s) for s in states])


def lstm(bb, inputs, attrs, opset, quantize_state=None, recurrent_codes=None, input_scale=None):
    """ONNX LSTM (gates i, o, f, c): Y, Y_h, Y_c. A dynamically quantized LSTM's (see
    `dynamic_quantization`) gives `quantize_state`, which maps each step's previous hidden state
    to what its product with R reads, and `recurrent_codes`, R's codes less their zero point
    [directions, 4 * hidden, hidden] and their scales [directions, 4 * hidden], or None where
    they are not constants, for its sequence kernel's integer products; and, where x and W are
    given as codes less their zero points, `input_scale`, their product's scale [directions,
    4 * hidden]."""
    rnn = _Recurrence(bb, inputs, attrs, gates=4)
    rnn.input_scale = input_scale
    if int(attrs.get("input_forget", 0)):
        raise NotImplementedError("input_forget=1")
    c0, peepholes = rnn.rest[0], rnn.rest[1]
    act = _activations(attrs, ["sigmoid", "tanh", "tanh"], len(rnn.reverse))
    quantized = quantize_state is not None
    if (not quantized or recurrent_codes is not None) and _one_kernel(
            rnn, act, [ACTIVATIONS["sigmoid"], ACTIVATIONS["tanh"], ACTIVATIONS["tanh"]], peepholes, quantized):
        states = [rnn.all_initial(rnn.h0), rnn.all_initial(c0)]
        if not quantized:
            func = lstm_sequence(rnn.seq, int(rnn.batch), rnn.hidden, tuple(rnn.reverse))
            recurrent = [rnn.all_recurrent()]
        else:
            func = lstm_quantized_sequence(rnn.seq, int(rnn.batch), rnn.hidden, tuple(rnn.reverse),
                                           str(recurrent_codes[0].ty.dtype))
            recurrent = list(recurrent_codes)
        return rnn.sequence_kernel(func, "lstm", [rnn.all_input_products(recurrent_bias=True), *recurrent, *states], 2)
    sequences, finals = [], []
    for d in range(len(rnn.reverse)):
        f, g, h_act = act[3 * d: 3 * d + 3]
        xw = rnn.input_products(d, recurrent_bias=True)  # both biases added once, not each step
        rt = rnn.emit(relax.op.permute_dims(_index(rnn.r, d)))
        p = [rnn.emit(relax.op.strided_slice(_index(peepholes, d), axes=[0], begin=[k * rnn.hidden],
                                             end=[(k + 1) * rnn.hidden])) for k in range(3)] if peepholes is not None else None
        h, c = rnn.initial(rnn.h0, d), rnn.initial(c0, d)
        hs = {}
        for t in rnn.steps(d):
            state = quantize_state(h) if quantized else h
            gates = rnn.emit(relax.op.add(_index(xw, t), relax.op.matmul(state, rt)))
            i, o, forget, cell = _gates(gates, 4, rnn.hidden)
            if p is not None:
                i, forget = relax.op.add(i, relax.op.multiply(p[0], c)), relax.op.add(forget, relax.op.multiply(p[2], c))
            i, forget, cell = f(rnn.clipped(i)), f(rnn.clipped(forget)), g(rnn.clipped(cell))
            c = rnn.emit(relax.op.add(relax.op.multiply(forget, c), relax.op.multiply(i, cell)))
            if p is not None:
                o = relax.op.add(o, relax.op.multiply(p[1], c))
            h = rnn.emit(relax.op.multiply(f(rnn.clipped(o)), h_act(c)))
            hs[t] = h
        sequences.append(rnn.sequence([hs[t] for t in range(rnn.seq)]))
        finals.append((h, c))
    return rnn.outputs(sequences, finals)


def _one_kernel(rnn: _Recurrence, activations, default, peepholes=None, quantized_state: bool = False) -> bool:
    """Whether the directions run as one kernel of `compute.recurrent`, each on a core:
    ONNX's `default` activations in every direction, no peepholes or clip, fp32, a static
    batch, and several steps, each small enough; or any steps where the state is quantized at
    each step: that kernel multiplies integer codes, and dense layers would each quantize the
    state in three more kernels. (One step, Silero VAD's per chunk, ran 3% slower so: its dense
    kernel reads R packed.)"""
    if not (list(activations) == default * len(rnn.reverse) and peepholes is None and rnn.clip is None
            and str(rnn.x.ty.dtype) == "float32" and isinstance(rnn.batch, tvm.tirx.IntImm)):
        return False
    return quantized_state or (1 < rnn.seq
                               and int(rnn.batch) * rnn.hidden * rnn.gates * rnn.hidden <= SEQUENCE_KERNEL_MAX_STEP)


def gru(bb, inputs, attrs, opset):
    """ONNX GRU (gates z, r, h): Y, Y_h."""
    rnn = _Recurrence(bb, inputs, attrs, gates=3)
    linear_before_reset = int(attrs.get("linear_before_reset", 0))
    act = _activations(attrs, ["sigmoid", "tanh"], len(rnn.reverse))
    hidden = rnn.hidden
    if _one_kernel(rnn, act, [ACTIVATIONS["sigmoid"], ACTIVATIONS["tanh"]]):
        func = gru_sequence(rnn.seq, int(rnn.batch), hidden, tuple(rnn.reverse), bool(linear_before_reset))
        args = [rnn.all_input_products(), rnn.all_recurrent(), rnn.all_recurrent_bias(), rnn.all_initial(rnn.h0)]
        return rnn.sequence_kernel(func, "gru", args, 1)
    sequences, finals = [], []
    for d in range(len(rnn.reverse)):
        f, g = act[2 * d: 2 * d + 2]
        xw, rb = rnn.input_products(d), rnn.recurrent_bias(d)
        rt = rnn.emit(relax.op.permute_dims(_index(rnn.r, d)))  # [hidden, 3 * hidden]
        h = rnn.initial(rnn.h0, d)
        rt_zr = rnn.emit(relax.op.strided_slice(rt, axes=[1], begin=[0], end=[2 * hidden]))
        rt_h = rnn.emit(relax.op.strided_slice(rt, axes=[1], begin=[2 * hidden], end=[3 * hidden]))
        rb_zr, rb_h = ((rnn.emit(relax.op.strided_slice(rb, axes=[0], begin=[0], end=[2 * hidden])),
                        rnn.emit(relax.op.strided_slice(rb, axes=[0], begin=[2 * hidden], end=[3 * hidden])))
                       if rb is not None else (None, None))
        one = relax.const(np.ones((), str(rnn.x.ty.dtype)))
        hs = {}
        for t in rnn.steps(d):
            step = rnn.emit(_index(xw, t))
            x_zr, x_h = _columns(step, 0, 2 * hidden), _columns(step, 2 * hidden, 3 * hidden)
            zr = relax.op.add(x_zr, relax.op.matmul(h, rt_zr))
            zr = rnn.emit(relax.op.add(zr, rb_zr) if rb_zr is not None else zr)
            z, r = (rnn.emit(f(rnn.clipped(part))) for part in _gates(zr, 2, hidden))
            if linear_before_reset:
                recurrent = relax.op.matmul(h, rt_h)
                recurrent = relax.op.add(recurrent, rb_h) if rb_h is not None else recurrent
                candidate = relax.op.add(x_h, relax.op.multiply(r, recurrent))
            else:
                candidate = relax.op.add(x_h, relax.op.matmul(relax.op.multiply(r, h), rt_h))
                candidate = relax.op.add(candidate, rb_h) if rb_h is not None else candidate
            candidate = rnn.emit(g(rnn.clipped(candidate)))
            h = rnn.emit(relax.op.add(relax.op.multiply(relax.op.subtract(one, z), candidate), relax.op.multiply(z, h)))
            hs[t] = h
        sequences.append(rnn.sequence([hs[t] for t in range(rnn.seq)]))
        finals.append((h,))
    return rnn.outputs(sequences, finals)
