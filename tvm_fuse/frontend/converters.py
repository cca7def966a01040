"""Our own conversions for ONNX ops where TVM's importer gives a form the fusion table cannot
see. Each takes (inputs, attrs, opset) and returns a Relax expression, or None to leave the
node to TVM's converter."""

from __future__ import annotations

import math

import numpy as np
from tvm import relax
from tvm.ir.expr import GenericConst


def _bound(value, default: float) -> float | None:
    """A clip bound as a float: None for one computed at run time; NaN means no bound (ORT)."""
    if value is None:
        return default
    if not isinstance(value, GenericConst) or value.value.numpy().size != 1:
        return None
    bound = float(value.value.numpy().reshape(()))
    return default if math.isnan(bound) else bound


def clip(inputs, attrs, opset):
    """`relax.clip`, not TVM's maximum/minimum TIR calls: relu6 is an activation post-op."""
    x = inputs[0]
    if not np.issubdtype(np.dtype(str(x.ty.dtype)), np.floating):
        return None
    if opset < 11:
        low, high = float(attrs.get("min", -math.inf)), float(attrs.get("max", math.inf))
    else:
        low = _bound(inputs[1] if len(inputs) > 1 else None, -math.inf)
        high = _bound(inputs[2] if len(inputs) > 2 else None, math.inf)
    if low is None or high is None:
        return None
    return relax.op.clip(x, low, high)


CONVERTERS = {
    "Clip": clip,
}
