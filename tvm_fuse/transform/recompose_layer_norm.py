"""A layer norm that an exporter wrote out op by op (ONNX before opset 17 has no
LayerNormalization: torch writes ReduceMean, Sub, Pow, ReduceMean, Add, Sqrt, Div, Mul, Add) as
one `nn.layer_norm` again, which `LowerRowwise` then runs as one kernel:

    mean = mean(x, -1);  d = x - mean;  var = mean(d ** 2 | d * d, -1) | variance(x, -1)
    y = d / sqrt(var + eps) | d * rsqrt(var + eps);  out = y * gamma + beta | y

over the last axis, with constant `eps`, `gamma` and `beta` (`gamma`, `beta` of the axis's
width; without them, as TVM imports an instance norm, 1 and 0). The new call records every
node it stands for (`provenance`). Any other form is left as it is."""

from __future__ import annotations

import numpy as np
import tvm
from tvm import relax
from tvm.ir.expr import GenericConst

from .. import provenance
from .relax_helpers import is_op, rebind_pass, scalar_value


def RecomposeLayerNorm() -> tvm.transform.Pass:
    return rebind_pass("tvm_fuse.RecomposeLayerNorm", _plan)


def _plan(func: relax.Function) -> dict[relax.Var, relax.Expr]:
    values = relax.analysis.get_var2val(func)
    plan = {}
    for var in values:
        found = _layer_norm(values, var)
        if found is not None:
            x, gamma, beta, epsilon, steps = found
            plan[var] = provenance.recorded(relax.op.nn.layer_norm(x, gamma, beta, axes=[-1], epsilon=epsilon),
                                            map(provenance.node_index, [var, *steps]))
    return plan


def _layer_norm(values: dict, out: relax.Var):
    """(x, gamma, beta, epsilon, the steps' variables) if `out` ends a written-out layer norm."""
    steps = []

    def value(var, *ops):
        found = values.get(var) if isinstance(var, relax.Var) else None
        if not is_op(found, *ops):
            raise LookupError
        steps.append(var)
        return found

    try:
        shifted = value(out, "relax.add")
        scaled = value(shifted.args[0], "relax.multiply")
        gamma, beta = _constant(scaled.args[1]), _constant(shifted.args[1])
        x, epsilon = _normalized(scaled.args[0], value)
    except LookupError:
        steps.clear()
        try:  # no scale and offset: an instance norm as TVM imports one (wav2vec2's GroupNorm)
            x, epsilon = _normalized(out, value)
        except LookupError:
            return None
        gamma, beta = np.ones(_static_width(x) or 0, np.float32), np.zeros(_static_width(x) or 0, np.float32)
    width = _static_width(x)
    if not (epsilon is not None and str(x.ty.dtype) == "float32" and width is not None
            and gamma is not None and beta is not None and gamma.size == beta.size == width):
        return None
    return x, relax.const(gamma.reshape(-1)), relax.const(beta.reshape(-1)), epsilon, steps[1:]


def _normalized(var, value):
    """(x, epsilon) if `var = (x - mean(x)) / sqrt(var(x) + eps)` (or `* rsqrt(...)`) over the
    last axis, the variance the mean of the centered squares or `variance(x)`; `value(var,
    *ops)` takes each step's value (LookupError where it is another op)."""
    normed = value(var, "relax.divide", "relax.multiply")
    centered, inverse = normed.args
    root = value(inverse, "relax.sqrt" if is_op(normed, "relax.divide") else "relax.rsqrt")
    padded = value(root.args[0], "relax.add")
    variance = value(padded.args[0], "relax.mean", "relax.variance")
    difference = value(centered, "relax.subtract")
    mean = value(difference.args[1], "relax.mean")
    x = difference.args[0]
    if is_op(variance, "relax.variance"):
        of_x = variance.args[0].same_as(x)
    else:
        square = value(variance.args[0], "relax.power", "relax.multiply")
        of_x = square.args[0].same_as(centered) and (
            square.args[1].same_as(centered) if is_op(square, "relax.multiply") else scalar_value(square.args[1]) == 2.0)
    if not (of_x and mean.args[0].same_as(x) and _last_axis(variance) and _last_axis(mean)):
        raise LookupError
    return x, scalar_value(padded.args[1])


def _static_width(x) -> int | None:
    width = x.ty.shape[-1] if isinstance(x.ty, relax.TensorType) and x.ty.shape is not None else None
    return int(width) if isinstance(width, tvm.tirx.IntImm) else None


def _last_axis(mean: relax.Call) -> bool:
    """A mean over the last axis that keeps it."""
    axes = [int(a) for a in mean.attrs.axis] if mean.attrs.axis is not None else None
    rank = mean.args[0].ty.ndim
    return bool(mean.attrs.keepdims) and axes is not None and [a % rank for a in axes] == [rank - 1]


def _constant(expr) -> np.ndarray | None:
    """The float32 values of a constant whose dims other than the last are 1, else None."""
    if not isinstance(expr, GenericConst) or str(expr.ty.dtype) != "float32":
        return None
    array = expr.value.numpy()
    return array if array.ndim >= 1 and all(d == 1 for d in array.shape[:-1]) else None
