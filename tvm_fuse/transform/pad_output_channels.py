"""Convs and dense layers with many output channels that the vector width does not divide (a
1000-class conv head, a 6625-character OCR head, a face detector's 28-channel conv) computed
with zero weights up to the next multiple of it, and cut back to size after their elementwise
chain (a leaky ReLU or PRelu's `maximum(x, x * slopes)` in it, and pools); where a conv reads
the chain's end, not cut at all: that conv takes the zero channels with zero weights, so the
whole chain runs in the blocked layout (the face detector's 24x24 net at batch 16 ran its next
conv in NCHW, 5x slower).

The blocked layout gives such a conv half-width blocks (1000 channels: 125 blocks of 8), whose
kernel runs on half-width vectors, one block at a time. Padding to 1024 costs 2.4% more
arithmetic and runs at full width, two blocks at a time. The cut (`strided_slice` on the channel axis) moves past the elementwise ops that only
this conv feeds (bias, batch-norm scale and shift, activations), whose per-channel constants
are padded along, so the fusion table still finds conv + bias + activation. A dense layer's
kernel packs its weight in blocks of the vector width only where the width divides the
columns; else it ran one column at a time (PP-OCRv4 rec's 6625 classes). Channels that only
narrow blocks divide pay more padding: Silero VAD's STFT, a dense layer of 258 columns, ran on
vectors of 2; a CRNN's classifier of 37 columns one column at a time.
"""

from __future__ import annotations

import numpy as np
import tvm
from tvm import relax
from tvm.ir.expr import GenericConst
from tvm.relax.expr_functor import PyExprMutator, mutator

from .relax_helpers import is_op, mutate_functions, readers, use_counts

# Pad only when the padding is at most this share of the channels; channels that only blocks
# of a quarter of the width or less divide (vectors of 4, 2 or 1) may take more.
MAX_PADDING = 1 / 32
MAX_PADDING_NARROW = 1 / 2

_UNARY = {"relax.nn.relu", "relax.nn.gelu", "relax.nn.gelu_tanh", "relax.nn.silu", "relax.nn.leakyrelu",
          "relax.nn.softplus", "relax.sigmoid", "relax.tanh", "relax.clip", "relax.exp", "relax.negative"}
_BINARY = {"relax.add": 0.0, "relax.subtract": 0.0, "relax.multiply": 0.0, "relax.maximum": 0.0,
           "relax.minimum": 0.0, "relax.divide": 1.0}  # op -> value padded channels of a constant take


def PadOutputChannels(block: int) -> tvm.transform.Pass:
    @tvm.transform.module_pass(opt_level=0, name="tvm_fuse.PadOutputChannels")
    def pad_output_channels(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        padder = _Padder(mod, block)
        return mutate_functions(mod, padder, padder.rewrite)

    return pad_output_channels


def padded_channels(channels: int, block: int) -> int | None:
    """The next multiple of 4, 2 or 1 blocks (more blocks let the kernel tile several at
    once), the first that padding reaches cheaply enough; None if none does. Channels that
    only narrow blocks divide go to the next whole block if that is within MAX_PADDING_NARROW."""
    for multiple in (4 * block, 2 * block, block):
        padded = -(-channels // multiple) * multiple
        if padded - channels <= channels * MAX_PADDING:
            return padded if padded != channels else None
    padded = -(-channels // block) * block
    return padded if channels % (block // 2) and padded - channels <= channels * MAX_PADDING_NARROW else None


@mutator
class _Padder(PyExprMutator):
    def __init__(self, mod: tvm.IRModule, block: int):
        super().__init__(mod)
        self.block = block
        self._chains: dict[relax.Var, tuple[int, int, bool, int]] = {}  # var -> (channels, padded, last, axis)
        self._inputs: dict[relax.Var, tuple[int, int]] = {}  # a conv reading a chain -> (its channels, padded)

    def rewrite(self, func: relax.Function) -> relax.Function | None:
        self._chains, self._inputs = _plan(func, self.block)
        return self.visit_expr(func) if self._chains else None

    def visit_var_binding_(self, binding: relax.VarBinding) -> None:
        planned, wide_input = self._chains.get(binding.var), self._inputs.get(binding.var)
        if planned is None and wide_input is None:
            return super().visit_var_binding_(binding)
        call = binding.value
        args = list(call.args)
        if wide_input is not None:  # a conv reading padded channels: zero weights for them
            weight = args[1].value.numpy()
            args[1] = relax.const(np.pad(weight, [(0, 0), (0, wide_input[1] - wide_input[0]), (0, 0), (0, 0)]))
        if planned is not None:
            channels, padded, last, axis = planned
            args = [_pad_constant(arg, call, channels, padded, axis) for arg in args]
        value = relax.Call(call.op, [self.visit_expr(a) for a in args], call.attrs, call.ty_args, call.span)
        wide = self.builder_.emit(value, binding.var.name)  # same name: same ONNX node
        if planned is not None and last:
            wide = self.builder_.emit(relax.op.strided_slice(wide, axes=[axis], begin=[0], end=[channels]))
        self.set_var_remap(binding.var, wide)


def _output_channels(call) -> int | None:
    """The output channels of a conv (NCHW, OIHW, ungrouped) or dense layer (x @ W[K, N]) with a
    constant weight, or None for any other call."""
    if not isinstance(call, relax.Call) or len(call.args) < 2 or not isinstance(call.args[1], GenericConst):
        return None
    if is_op(call, "relax.nn.conv2d") and int(call.attrs.groups) == 1 and str(call.attrs.data_layout) == "NCHW" \
            and str(call.attrs.kernel_layout) == "OIHW":
        return int(call.args[1].ty.shape[0])
    if is_op(call, "relax.matmul") and call.args[1].ty.ndim == 2:
        return int(call.args[1].ty.shape[1])
    return None


def _plan(func: relax.Function, block: int) -> tuple[dict, dict]:
    """Each paddable conv or dense layer and the elementwise chain only it feeds: var ->
    (channels, padded, last, channel axis); and each conv that reads a chain's end as its data:
    var -> (its input channels, padded)."""
    uses = use_counts(func)
    bindings = [b for blk in func.body.blocks for b in blk.bindings if isinstance(b, relax.VarBinding)]
    read_by = readers(func)
    plan, inputs = {}, {}
    for binding in bindings:
        channels = _output_channels(binding.value)
        padded = padded_channels(channels, block) if channels is not None else None
        if padded is None:
            continue
        axis = _axis(binding.value)
        chain = [binding.var]
        while True:
            last, readers_of_last = chain[-1], read_by.get(chain[-1], [])
            reader = readers_of_last[0] if uses[last] == 1 and len(readers_of_last) == 1 else None  # None: returned
            if reader is not None and (_elementwise_per_channel(reader.value, last, channels, axis)
                                       or _spatial_reduction(reader.value, last, axis) or _pool(reader.value, last, axis)):
                chain.append(reader.var)
            elif (slope_max := _slope_max(readers_of_last, last, channels, axis, uses)) is not None:
                chain.extend(slope_max)
            else:
                break
        # A conv that reads the chain takes the zero channels too, with zero weights for them:
        # no cut, and its input's channels stay a multiple of the block.
        consumer = _reading_conv(read_by.get(chain[-1], []), chain[-1], uses) if axis == 1 else None
        plan.update({var: (channels, padded, var.same_as(chain[-1]) and consumer is None, axis) for var in chain})
        if consumer is not None:
            inputs[consumer] = (channels, padded)
    return plan, inputs


def _axis(anchor: relax.Call) -> int:
    """The channel axis of what `anchor` computes: 1 for a conv (NCHW), -1 (the last) for a dense."""
    return 1 if is_op(anchor, "relax.nn.conv2d") else -1


def _slope_max(readers_of_x, x: relax.Var, channels: int, axis: int, uses) -> list | None:
    """[the multiply, the maximum] where `x`'s two readers are `maximum(x, x * slopes)` (a leaky
    ReLU or PRelu, `SlopesToMax`), slopes a scalar or per channel; else None."""
    if len(readers_of_x) != 2 or uses[x] != 2 or any(r is None for r in readers_of_x):
        return None
    scaled = next((r for r in readers_of_x if _elementwise_per_channel(r.value, x, channels, axis)
                   and is_op(r.value, "relax.multiply")), None)
    if scaled is None or uses[scaled.var] != 1:
        return None
    maximum = next(r for r in readers_of_x if r is not scaled)
    args = list(maximum.value.args) if is_op(maximum.value, "relax.maximum") else []
    if not (any(a.same_as(x) for a in args) and any(a.same_as(scaled.var) for a in args)):
        return None
    return [scaled.var, maximum.var]


def _pool(call, operand: relax.Var, axis: int) -> bool:
    """`call` pools `operand` (NCHW) per channel: zero channels stay zero."""
    return (axis == 1 and is_op(call, "relax.nn.max_pool2d", "relax.nn.avg_pool2d") and call.args[0].same_as(operand)
            and str(call.attrs.layout) == "NCHW" and str(call.attrs.out_layout) == "NCHW")


def _reading_conv(readers_of_x, x: relax.Var, uses) -> relax.Var | None:
    """The ungrouped NCHW conv with a constant weight that is `x`'s only reader, as its data."""
    if uses[x] != 1 or len(readers_of_x) != 1 or readers_of_x[0] is None:
        return None
    call = readers_of_x[0].value
    if _output_channels(call) is None or not is_op(call, "relax.nn.conv2d") or not call.args[0].same_as(x):
        return None
    return readers_of_x[0].var


def _elementwise_per_channel(call, operand: relax.Var, channels: int, axis: int) -> bool:
    """`call` maps `operand` elementwise, with any other operand a scalar or per-channel constant."""
    if is_op(call, *_UNARY):
        return call.args[0].same_as(operand)
    if not is_op(call, *_BINARY):
        return False
    others = [a for a in call.args if not a.same_as(operand)]
    return len(others) == 1 and isinstance(others[0], GenericConst) and _per_channel(others[0], channels, axis)


def _spatial_reduction(call, operand: relax.Var, axis: int) -> bool:
    """`call` reduces a conv's `operand` over its spatial axes only, keeping them (a global
    pool). The cut goes after it: SqueezeNet's 1000-class head, cut before its global pool,
    ran the pool in NCHW after a layout transform of the whole 13x13 map, where the pool in
    blocks leaves a transform of 1024 values."""
    if axis != 1 or not is_op(call, "relax.mean", "relax.max", "relax.sum") or not call.args[0].same_as(operand):
        return False
    reduced = call.attrs.axis
    return bool(call.attrs.keepdims) and reduced is not None and {int(a) % 4 for a in reduced} <= {2, 3}


def _per_channel(const: GenericConst, channels: int, axis: int) -> bool:
    """A scalar, or constant over all but the channel axis of a tensor of rank > `axis` (a
    conv's [C, 1, 1], a dense layer's [N])."""
    shape = [int(d) for d in const.ty.shape]
    if all(d == 1 for d in shape):
        return True
    if axis == 1:
        return len(shape) in (3, 4) and shape[-3] == channels and all(d == 1 for d in shape[-2:])
    return shape[-1] == channels and all(d == 1 for d in shape[:-1])


def _pad_constant(arg, call: relax.Call, channels: int, padded: int, axis: int):
    """A conv or dense weight padded with zero output channels; a per-channel constant of the
    chain padded with a value harmless to its op; anything else as it is."""
    if not isinstance(arg, GenericConst):
        return arg
    value = arg.value.numpy()
    if is_op(call, "relax.nn.conv2d", "relax.matmul"):
        weight_axis = 0 if is_op(call, "relax.nn.conv2d") else 1
        widths = [(0, padded - channels if a == weight_axis else 0) for a in range(value.ndim)]
        return relax.const(np.pad(value, widths))
    channel_axis = value.ndim - 3 if axis == 1 else value.ndim - 1
    if channel_axis >= 0 and value.shape[channel_axis] == channels:
        widths = [(0, padded - channels if a == channel_axis else 0) for a in range(value.ndim)]
        return relax.const(np.pad(value, widths, constant_values=_BINARY[call.op.name]))
    return arg
