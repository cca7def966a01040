"""Inference batch-norm as one scale and shift per channel, folded into the conv or dense layer
in front of it when nothing else reads that layer.

ONNX BatchNormalization imports as an `R.nn.batch_norm` tuple and its items `[0]`, `[1]`, `[2]`.
With constant statistics and no training, `[0]` is `x * scale + shift` per channel, where
`scale = gamma / sqrt(var + eps)` and `shift = beta - mean * scale`, and `[1]`, `[2]` are the
moving mean and variance unchanged. When `x` is a `conv1d`/`conv2d` (NCHW data, OIHW kernel, any
groups) or a `matmul` by a constant 2-D weight, perhaps plus a constant per-channel bias, and
nothing else reads them, the scale goes into the weight's output channels and the shift into one
bias add, `conv(data, W * scale) + bias`: the conv + bias form the fusion table expects.
Otherwise `[0]` becomes `x * scale + shift`. The new constants are computed here, in numpy.

TVM's `DecomposeOpsForInference` would emit `(x - mean) / sqrt(var + eps) * gamma + beta`, four
passes over the activation in bindings named `lv` (so without their ONNX node), and never folds
into the conv. Run this pass after `FoldConstant` (a conv bias is then a constant rather than a
reshape of one) and before `DecomposeOpsForInference`, which still lowers what this pass leaves:
batch-norms in training mode or with non-constant parameters.

Provenance: the conv (or matmul) keeps its binding and node; the bias add takes the batch-norm's
`[0]` binding, and the multiply of the unfolded form is named after the batch-norm too.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection
from dataclasses import dataclass

import numpy as np
import tvm
from tvm import relax

from .relax_helpers import dtype, is_op, rebind_pass, use_counts

# Convolutions that fold: op -> (data layout, kernel layout). The channel axis of the data is 1,
# the output-channel axis of the kernel 0, for any groups (depthwise included).
_CONV_LAYOUTS = {
    "relax.nn.conv1d": ("NCW", "OIW"),
    "relax.nn.conv2d": ("NCHW", "OIHW"),
}


def FoldBatchNorm(into: Collection[str] = ("conv", "fc")) -> tvm.transform.Pass:
    """Constant inference batch-norms, and scale-and-shifts by constants, -> folded into the
    conv/matmul before them (batch-norms that cannot be: scale and shift). `into` names the layers that may take them: `conv`, `fc` (the fusion switches
    `conv_bn` and `fc_bn` remove them)."""
    return rebind_pass("tvm_fuse.FoldBatchNorm", lambda func: _plan(func, frozenset(into)))


@dataclass(frozen=True)
class _BatchNorm:
    """A constant inference batch-norm as `x * scale + shift` along `axis` (float64 vectors)."""

    x: relax.Expr
    axis: int
    scale: np.ndarray
    shift: np.ndarray

    @classmethod
    def of(cls, call) -> _BatchNorm | None:
        if not is_op(call, "relax.nn.batch_norm") or call.attrs.training:
            return None
        x, params = call.args[0], call.args[1:]
        if not isinstance(x.ty, relax.TensorType) or x.ty.ndim < 1:
            return None
        if not all(isinstance(p, tvm.ir.GenericConst) and dtype(p) == dtype(x) for p in params):
            return None
        gamma, beta, mean, var = (p.value.numpy().astype(np.float64) for p in params)
        attrs = call.attrs
        scale = (gamma if attrs.scale else 1.0) / np.sqrt(var + attrs.epsilon)
        shift = (beta if attrs.center else 0.0) - mean * scale
        return cls(x, int(attrs.axis) % x.ty.ndim, scale, shift)

    def shaped(self, vector: np.ndarray) -> tvm.ir.GenericConst:
        """`vector` as a constant that broadcasts along the channel axis of `x`."""
        after = self.x.ty.ndim - 1 - self.axis
        shape = (-1,) if after == 0 else (1,) * self.axis + (-1,) + (1,) * after  # (C,) or (1, C, 1, 1)
        return relax.const(vector.reshape(shape).astype(dtype(self.x)))


@dataclass(frozen=True)
class _Layer:
    """A conv or matmul by a constant weight, and the constant per-channel bias after it."""

    var: relax.Var  # bound to the conv/matmul
    call: relax.Call
    weight: np.ndarray
    out_channel_axis: int  # of the weight
    bias: np.ndarray | None  # (C,)

    def folded(self, bn: _BatchNorm) -> tuple[relax.Call, relax.Call]:
        """The layer's new value, with `bn`'s scale in its weight, and the bias add after it."""
        scale_shape = [-1 if i == self.out_channel_axis else 1 for i in range(self.weight.ndim)]
        weight = (self.weight * bn.scale.reshape(scale_shape)).astype(self.weight.dtype)
        bias = bn.shift if self.bias is None else self.bias * bn.scale + bn.shift
        call = relax.Call(self.call.op, [self.call.args[0], relax.const(weight)], self.call.attrs)
        return call, relax.op.add(self.var, bn.shaped(bias))


def _plan(func: relax.Function, into: frozenset[str]) -> dict[relax.Var, relax.Expr]:
    """The bindings to rewrite in `func` and their new values."""
    values = dict(relax.analysis.get_var2val(func).items())
    uses = use_counts(func)
    items: dict[relax.Var, list[relax.Var]] = {}  # batch-norm tuple -> its TupleGetItem bindings
    for var, value in values.items():
        if isinstance(value, relax.TupleGetItem) and isinstance(value.tuple_value, relax.Var):
            items.setdefault(value.tuple_value, []).append(var)
    plan: dict[relax.Var, relax.Expr] = {}
    for var, value in values.items():
        bn = _BatchNorm.of(value)
        if bn is None or uses[var] != len(items.get(var, [])):  # the tuple itself is read
            continue
        layer = _layer(bn, values, uses, into)
        for item in items.get(var, []):
            index = values[item].index
            if index > 0:  # running mean and variance: the statistics, unchanged in inference
                plan[item] = value.args[2 + index]
            elif layer is not None:
                plan[layer.var], plan[item] = layer.folded(bn)
            else:
                plan[item] = relax.op.add(relax.op.multiply(bn.x, bn.shaped(bn.scale)), bn.shaped(bn.shift))
    # Then scale-and-shifts by constants written out, `x * s + t` or `x * s`, the add first so
    # that its multiply is not folded alone.
    adds_first = sorted(values.items(), key=lambda item: not is_op(item[1], "relax.add"))
    for var, value in adds_first:
        affine = _affine(value, values, uses)
        layer = _layer(affine, values, uses, into) if affine is not None else None
        if layer is not None and layer.var not in plan:
            plan[layer.var], plan[var] = layer.folded(affine)
    return plan


def _constant_operand(call: relax.Call) -> tuple[relax.Var, tvm.ir.GenericConst] | None:
    """(x, c) of a binary call on a variable and a constant, in either order."""
    a, b = call.args
    if isinstance(a, tvm.ir.GenericConst):
        a, b = b, a
    return (a, b) if isinstance(a, relax.Var) and isinstance(b, tvm.ir.GenericConst) else None


def _affine(value, values: dict, uses: Counter) -> _BatchNorm | None:
    """`x * s + t` (or `x * s`) with constants `s`, `t`, one value or one per channel of the
    conv / matmul behind `x`, as a batch-norm of `x`: a batch-norm an exporter wrote out, or a
    learnable affine (PP-LCNetV3's after every conv)."""
    shift = None
    if is_op(value, "relax.add"):
        operands = _constant_operand(value)
        if operands is None or not is_op(values.get(operands[0]), "relax.multiply") or uses[operands[0]] != 1:
            return None
        value, shift = values[operands[0]], operands[1]
    if not is_op(value, "relax.multiply") or _constant_operand(value) is None:
        return None
    x, scale = _constant_operand(value)
    x, offsets = _offsets(x, values, uses)
    layer = values.get(x)
    if is_op(layer, "relax.add") and _constant_operand(layer) is not None:  # its bias add
        layer = values.get(_constant_operand(layer)[0])
    if not isinstance(x.ty, relax.TensorType) or x.ty.shape is None:
        return None
    if is_op(layer, *_CONV_LAYOUTS):
        axis = 1
    elif is_op(layer, "relax.matmul"):
        axis = x.ty.ndim - 1
    else:
        return None
    if not isinstance(x.ty.shape[axis], tvm.tirx.IntImm):
        return None
    probe = _BatchNorm(x, axis, np.ones(int(x.ty.shape[axis])), np.zeros(int(x.ty.shape[axis])))
    scale = _channel_vector(scale, probe)
    shift = probe.shift if shift is None else _channel_vector(shift, probe)
    added = [_channel_vector(constant, probe) for constant, _ in offsets]
    if scale is None or shift is None or any(a is None for a in added):
        return None
    shift = shift + scale * sum((sign * a for a, (_, sign) in zip(added, offsets)), np.zeros_like(scale))
    return _BatchNorm(x, axis, scale, shift)


def _offsets(x, values: dict, uses: Counter) -> tuple[relax.Var, list[tuple[tvm.ir.GenericConst, float]]]:
    """`x` as `y + a - b ...` with constants (TensorFlow's batch norm, `(x - mean) * s + t`, after
    a conv's bias add): `y` and the constants, each with its sign. The add of `y`'s own layer
    (its bias) is left to `_layer`; values something else reads stop the walk."""
    offsets = []
    while isinstance(x, relax.Var) and uses[x] == 1:
        value = values.get(x)
        if is_op(value, "relax.subtract") and isinstance(value.args[1], tvm.ir.GenericConst):
            y, constant, sign = value.args[0], value.args[1], -1.0
        elif is_op(value, "relax.add") and _constant_operand(value) is not None:
            (y, constant), sign = _constant_operand(value), 1.0
            if not is_op(values.get(y), "relax.add", "relax.subtract"):
                break  # a layer's bias add
        else:
            break
        if not isinstance(y, relax.Var):
            break
        offsets.append((constant, sign))
        x = y
    return x, offsets


def _layer(bn: _BatchNorm, values: dict, uses: Counter, into: frozenset[str]) -> _Layer | None:
    """The conv or matmul (and bias) that only feeds `bn` and whose output channels it scales."""
    var, bias = bn.x, None
    if not isinstance(var, relax.Var) or uses[var] != 1:
        return None
    if is_op(values.get(var), "relax.add"):
        lhs, rhs = values[var].args
        if isinstance(lhs, tvm.ir.GenericConst):
            lhs, rhs = rhs, lhs
        bias = _channel_vector(rhs, bn)
        if bias is None or not isinstance(lhs, relax.Var) or uses[lhs] != 1:
            return None
        var = lhs
    call = values.get(var)
    if not isinstance(call, relax.Call) or len(call.args) != 2:
        return None
    weight = call.args[1]
    if not isinstance(weight, tvm.ir.GenericConst) or dtype(weight) != dtype(bn.x):
        return None
    if not np.issubdtype(np.dtype(dtype(weight)), np.floating):
        return None
    if is_op(call, *_CONV_LAYOUTS) and "conv" in into:
        data, kernel = _CONV_LAYOUTS[call.op.name]
        layouts = (call.attrs.data_layout, call.attrs.kernel_layout, call.attrs.out_layout)
        if layouts != (data, kernel, data) or bn.axis != 1:
            return None
        out_channel_axis = 0
    elif is_op(call, "relax.matmul") and "fc" in into and weight.ty.ndim == 2 and bn.axis == bn.x.ty.ndim - 1:
        out_channel_axis = 1
    else:
        return None
    return _Layer(var, call, weight.value.numpy(), out_channel_axis, bias)


def _channel_vector(expr, bn: _BatchNorm) -> np.ndarray | None:
    """A constant that adds one value per channel of `bn.x` (shape (1, C, 1, 1), (C, 1, 1), ...,
    or one element), as a float64 vector of length C; None for anything else."""
    if not isinstance(expr, tvm.ir.GenericConst) or dtype(expr) != dtype(bn.x):
        return None
    array, ndim, channels = expr.value.numpy(), bn.x.ty.ndim, bn.scale.size
    if array.ndim > ndim:
        return None
    shape = (1,) * (ndim - array.ndim) + array.shape
    if any(d != 1 for i, d in enumerate(shape) if i != bn.axis) or shape[bn.axis] not in (1, channels):
        return None
    return np.broadcast_to(array.reshape(-1).astype(np.float64), (channels,))
