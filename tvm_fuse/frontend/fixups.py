"""ONNX-level rewrites for graphs that TVM 0.27's importer rejects or imports wrongly.

Each fix-up is a function `ModelProto -> ModelProto` (the input is never changed) that leaves
the model's values unchanged and only reshapes the graph into a form the importer handles. The
table `FIXUPS` says, per entry, which importer gap it closes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import onnx
from onnx import helper, numpy_helper


def constant_values(graph: onnx.GraphProto) -> dict[str, np.ndarray]:
    """Values known at import time: initializers and Constant nodes with a tensor value."""
    values = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
    for node in graph.node:
        if node.op_type == "Constant":
            for attribute in node.attribute:
                if attribute.name == "value":
                    values[node.output[0]] = numpy_helper.to_array(attribute.t)
    return values


def _replace_nodes(model: onnx.ModelProto, rewrite: Callable) -> onnx.ModelProto:
    """A copy of `model` whose top-level nodes are `rewrite(node)` (a list of nodes each)."""
    fixed = onnx.ModelProto()
    fixed.CopyFrom(model)
    nodes = [new for node in model.graph.node for new in rewrite(node)]
    del fixed.graph.node[:]
    fixed.graph.node.extend(nodes)
    return fixed


def fold_constant_of_shape(model: onnx.ModelProto) -> onnx.ModelProto:
    """ConstantOfShape with a constant shape -> a Constant holding the filled tensor."""
    constants = constant_values(model.graph)

    def rewrite(node):
        if node.op_type != "ConstantOfShape" or node.input[0] not in constants:
            return [node]
        shape = [int(d) for d in constants[node.input[0]].reshape(-1)]
        fill = np.zeros(1, np.float32)  # the ONNX default value
        for attribute in node.attribute:
            if attribute.name == "value":
                fill = numpy_helper.to_array(attribute.t)
        tensor = numpy_helper.from_array(np.full(shape, fill.reshape(-1)[0], fill.dtype))
        return [helper.make_node("Constant", [], [node.output[0]], name=node.name, value=tensor)]

    return _replace_nodes(model, rewrite)


def _dim_source(name: str, producers: dict, constants: dict) -> tuple[str, int] | None:
    """(x, axis) if the scalar `name` is `Shape(x)[axis]`, through Gather/Squeeze/Cast/Reshape."""
    index = None
    while name in producers:
        node = producers[name]
        if node.op_type in ("Cast", "Squeeze", "Unsqueeze", "Reshape", "Identity"):
            name = node.input[0]
        elif node.op_type == "Gather" and index is None and constants.get(node.input[1], np.zeros(2)).size == 1:
            index = int(constants[node.input[1]].reshape(-1)[0])
            name = node.input[0]
        elif node.op_type == "Shape":
            attrs = {a.name: a.i for a in node.attribute}
            start, end = attrs.get("start", 0), attrs.get("end")
            if start < 0 or (index or 0) < 0:
                return None  # would need the rank of x
            if index is None and (end is None or end - start != 1):
                return None  # a whole shape, not one dim
            return node.input[0], start + (index or 0)
        else:
            return None
    return None


def range_over_dim_to_cumsum(model: onnx.ModelProto) -> onnx.ModelProto:
    """Range(0, Shape(x)[i], 1) -> exclusive CumSum over ones of Shape(x)[i:i+1]."""
    constants = constant_values(model.graph)
    producers = {out: node for node in model.graph.node for out in node.output}

    def is_scalar(name, value):
        return name in constants and constants[name].size == 1 and constants[name].reshape(-1)[0] == value

    def rewrite(node):
        if node.op_type != "Range" or not (is_scalar(node.input[0], 0) and is_scalar(node.input[2], 1)):
            return [node]
        source = _dim_source(node.input[1], producers, constants)
        if source is None:
            return [node]
        x, axis = source
        out = node.output[0]
        dtype = helper.np_dtype_to_tensor_dtype(constants[node.input[0]].dtype)
        return [
            _part_of(node, helper.make_node("Shape", [x], [f"{out}/dim"], name=f"{node.name}/dim",
                                            start=axis, end=axis + 1)),
            _part_of(node, helper.make_node("ConstantOfShape", [f"{out}/dim"], [f"{out}/ones"], name=f"{node.name}/ones",
                                            value=numpy_helper.from_array(np.ones(1, np.int64)))),
            _part_of(node, helper.make_node("Constant", [], [f"{out}/axis"], name=f"{node.name}/axis",
                                            value=numpy_helper.from_array(np.array(0, np.int64)))),
            _part_of(node, helper.make_node("CumSum", [f"{out}/ones", f"{out}/axis"], [f"{out}/count"],
                                            name=f"{node.name}/cumsum", exclusive=1)),
            helper.make_node("Cast", [f"{out}/count"], [out], name=node.name, to=dtype),
        ]

    return _replace_nodes(model, rewrite)


@dataclass(frozen=True)
class Fixup:
    name: str
    apply: Callable[[onnx.ModelProto], onnx.ModelProto]
    why: str


FIXUPS = (
    Fixup(
        "fold_constant_of_shape",
        fold_constant_of_shape,
        "The importer broadcasts ConstantOfShape's 1-element `value` to the shape, which fails "
        "for a rank-0 shape ('broadcast_to expects ... ndim 0'): torch exports one on BERT's "
        "attention-mask path (transformers' masking_utils).",
    ),
    Fixup(
        "range_over_dim_to_cumsum",
        range_over_dim_to_cumsum,
        "The importer gives Range with a run-time limit a fresh symbolic length (range_len_N) "
        "that no later op can equate with the dim it came from, so Expand/Add/Reshape after it "
        "fail ('Cannot use and / or / not operator to Expr'). A CumSum over Shape(x)[i:i+1] "
        "carries x's own dim through.",
    ),
)


_PART_OF = "tvm_fuse fix-up, part of node "


def _part_of(original: onnx.NodeProto, part: onnx.NodeProto) -> onnx.NodeProto:
    """Mark `part`, a node a fix-up added, as standing for the user's node `original`."""
    part.doc_string = _PART_OF + original.name
    return part


def user_node_name(node: onnx.NodeProto) -> str:
    """The name of the user's node that `node` is (or is part of, after a fix-up)."""
    return node.doc_string.removeprefix(_PART_OF) if node.doc_string.startswith(_PART_OF) else node.name


def apply_fixups(model: onnx.ModelProto) -> onnx.ModelProto:
    """`model` with every fix-up applied, in table order."""
    for fixup in FIXUPS:
        model = fixup.apply(model)
    return model
