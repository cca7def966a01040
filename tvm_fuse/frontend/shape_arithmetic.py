"""Shape arithmetic of constants folded while importing: a node whose inputs are all integer
constants (a static Shape's dims, or integers computed from them) becomes the constants it
computes, by ONNX's reference evaluator. TVM's importer folds a few such ops itself but computes
the rest (Gather, Slice of a shape) at run time, as tensors, and a Reshape or Expand cannot take
a shape computed so ("Reshape requires the input new shape to be Shape")."""

from __future__ import annotations

import numpy as np
import onnx
import tvm
from onnx.reference import ReferenceEvaluator
from tvm import relax
from tvm.ir.expr import GenericConst

MAX_ELEMENTS = 1024  # of any input or output: a shape's numbers, not data


def _value(expr) -> np.ndarray | None:
    """`expr` as an integer array, when it is one known at build time."""
    if isinstance(expr, GenericConst):
        value = expr.value.numpy()
    elif isinstance(expr, relax.ShapeExpr) and all(isinstance(d, tvm.tirx.IntImm) for d in expr.values):
        value = np.array([int(d) for d in expr.values], np.int64)
    else:
        return None
    return value if value.dtype.kind in "iub" and value.size <= MAX_ELEMENTS else None


def folded(node: onnx.NodeProto, inputs: list, opset: int) -> relax.Expr | None:
    """The outputs of `node` (of `inputs`, TVM's converted ones) as constants, or None where an
    input is not an integer (or boolean) constant, an output is not one or is large, or the node has a
    subgraph or no inputs (a random generator)."""
    given = [(name, expr) for name, expr in zip(node.input, inputs) if name]
    if not given or node.domain not in ("", "ai.onnx") or any(a.type in (onnx.AttributeProto.GRAPH,
                                                                          onnx.AttributeProto.GRAPHS)
                                                              for a in node.attribute):
        return None
    values = {name: _value(expr) for name, expr in given}
    if any(value is None for value in values.values()):
        return None
    try:
        outputs = ReferenceEvaluator(node, opsets={"": opset}).run(None, values)
    except Exception:  # left to TVM's converter, whose error names the node
        return None
    outputs = [np.asarray(out) for out in outputs]
    if any(out.dtype.kind not in "iub" or out.size > MAX_ELEMENTS for out in outputs):
        return None
    constants = [relax.const(out, str(out.dtype)) for out in outputs]
    return constants[0] if len(constants) == 1 else relax.Tuple(constants)
