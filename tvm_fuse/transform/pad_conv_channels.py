"""Convs with many output channels that the vector width does not divide (a 1000-class conv
head) computed with zero weights up to the next multiple of it, and cut back to size after
their elementwise chain.

The blocked layout gives such a conv half-width blocks (1000 channels: 125 blocks of 8), whose
kernel runs on half-width vectors, one block at a time. Padding to 1024 costs 2.4% more
arithmetic and runs at full width, two blocks at a time. The cut (`strided_slice` on the channel axis) moves past the elementwise ops that only
this conv feeds (bias, batch-norm scale and shift, activations), whose per-channel constants
are padded along, so the fusion table still finds conv + bias + activation.
"""

from __future__ import annotations

import numpy as np
import tvm
from tvm import relax
from tvm.ir.expr import GenericConst
from tvm.relax.expr_functor import PyExprMutator, mutator

from .rebind import is_op, mutate_functions, readers, use_counts

# Pad only when the padding is at most this share of the channels.
MAX_PADDING = 1 / 32

_UNARY = {"relax.nn.relu", "relax.nn.gelu", "relax.nn.gelu_tanh", "relax.nn.silu", "relax.nn.leakyrelu",
          "relax.nn.softplus", "relax.sigmoid", "relax.tanh", "relax.clip", "relax.exp", "relax.negative"}
_BINARY = {"relax.add": 0.0, "relax.subtract": 0.0, "relax.multiply": 0.0, "relax.maximum": 0.0,
           "relax.minimum": 0.0, "relax.divide": 1.0}  # op -> value padded channels of a constant take


def PadConvChannels(block: int) -> tvm.transform.Pass:
    @tvm.transform.module_pass(opt_level=0, name="tvm_fuse.PadConvChannels")
    def pad_conv_channels(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        padder = _Padder(mod, block)
        return mutate_functions(mod, padder, padder.rewrite)

    return pad_conv_channels


def padded_channels(channels: int, block: int) -> int | None:
    """The next multiple of 4, 2 or 1 blocks (more blocks let the kernel tile several at
    once), the first that padding reaches cheaply enough; None if none does."""
    for multiple in (4 * block, 2 * block, block):
        padded = -(-channels // multiple) * multiple
        if padded - channels <= channels * MAX_PADDING:
            return padded if padded != channels else None
    return None


@mutator
class _Padder(PyExprMutator):
    def __init__(self, mod: tvm.IRModule, block: int):
        super().__init__(mod)
        self.block = block
        self._chains: dict[relax.Var, tuple[int, int, bool]] = {}  # var -> (channels, padded, last)

    def rewrite(self, func: relax.Function) -> relax.Function | None:
        self._chains = _plan(func, self.block)
        return self.visit_expr(func) if self._chains else None

    def visit_var_binding_(self, binding: relax.VarBinding) -> None:
        planned = self._chains.get(binding.var)
        if planned is None:
            return super().visit_var_binding_(binding)
        channels, padded, last = planned
        call = binding.value
        args = [_pad_constant(arg, call, channels, padded) for arg in call.args]
        value = relax.Call(call.op, [self.visit_expr(a) for a in args], call.attrs, call.ty_args, call.span)
        wide = self.builder_.emit(value, binding.var.name)  # same name: same ONNX node
        if last:
            wide = self.builder_.emit(relax.op.strided_slice(wide, axes=[1], begin=[0], end=[channels]))
        self.set_var_remap(binding.var, wide)


def _plan(func: relax.Function, block: int) -> dict:
    """Each paddable conv and the elementwise chain only it feeds: var -> (channels, padded, last)."""
    uses = use_counts(func)
    bindings = [b for blk in func.body.blocks for b in blk.bindings if isinstance(b, relax.VarBinding)]
    read_by = readers(func)
    plan = {}
    for binding in bindings:
        conv = binding.value
        if not (is_op(conv, "relax.nn.conv2d") and int(conv.attrs.groups) == 1
                and str(conv.attrs.data_layout) == "NCHW" and str(conv.attrs.kernel_layout) == "OIHW"
                and isinstance(conv.args[1], GenericConst)):
            continue
        channels = int(conv.args[1].ty.shape[0])
        padded = padded_channels(channels, block)
        if padded is None:
            continue
        chain = [binding.var]
        while uses[chain[-1]] == 1 and len(read_by.get(chain[-1], [])) == 1:
            reader = read_by[chain[-1]][0]  # None: the function returns it
            if reader is None or not _elementwise_per_channel(reader.value, chain[-1], channels):
                break
            chain.append(reader.var)
        plan.update({var: (channels, padded, var.same_as(chain[-1])) for var in chain})
    return plan


def _elementwise_per_channel(call, operand: relax.Var, channels: int) -> bool:
    """`call` maps `operand` elementwise, with any other operand a scalar or per-channel constant."""
    if is_op(call, *_UNARY):
        return call.args[0].same_as(operand)
    if not is_op(call, *_BINARY):
        return False
    others = [a for a in call.args if not a.same_as(operand)]
    return len(others) == 1 and isinstance(others[0], GenericConst) and _per_channel(others[0], channels)


def _per_channel(const: GenericConst, channels: int) -> bool:
    shape = [int(d) for d in const.ty.shape]
    return all(d == 1 for d in shape) or (len(shape) in (3, 4) and shape[-3] == channels
                                          and all(d == 1 for d in shape[-2:]))


def _pad_constant(arg, call: relax.Call, channels: int, padded: int):
    """A conv weight padded with zero output channels; a per-channel constant of the chain
    padded with a value harmless to its op; anything else as it is."""
    if not isinstance(arg, GenericConst):
        return arg
    value = arg.value.numpy()
    if is_op(call, "relax.nn.conv2d"):
        widths = [(0, padded - channels)] + [(0, 0)] * (value.ndim - 1)
        return relax.const(np.pad(value, widths))
    if value.ndim >= 3 and value.shape[-3] == channels:
        widths = [(0, 0)] * (value.ndim - 3) + [(0, padded - channels), (0, 0), (0, 0)]
        return relax.const(np.pad(value, widths, constant_values=_BINARY[call.op.name]))
    return arg
