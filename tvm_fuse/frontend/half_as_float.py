"""A float16 model computes in float32: its inputs and outputs stay float16, everything between
(weights, constants, casts, subgraphs) is float32.

TVM's kernels for float16 ops are its generic, unscheduled ones, which add float16 products in
float16: slovorez's float16 morpheme segmenter ran 37x slower than ONNX Runtime, and its first
conv (768 products a sum) came out 1.1e-2 of its largest value away. In float32 the model takes
our fused, blocked kernels, and each result is at least as exact as ONNX Runtime's (which rounds
to float16 after each op); the outputs round to float16 once.
"""

from __future__ import annotations

import onnx
from onnx import TensorProto, helper, numpy_helper

_HALF, _FLOAT = TensorProto.FLOAT16, TensorProto.FLOAT


def compute_half_in_float(model: onnx.ModelProto) -> onnx.ModelProto:
    """`model` (never changed) computing its float16 tensors in float32, or `model` itself if it
    has none."""
    if not _has_half(model.graph):
        return model
    widened = onnx.ModelProto()
    widened.CopyFrom(model)
    graph = widened.graph
    _widen(graph)
    casts_in = []
    for value in graph.input:
        if value.type.tensor_type.elem_type == _HALF:
            _rename_uses(graph, value.name, f"{value.name}__float")
            casts_in.append(helper.make_node("Cast", [value.name], [f"{value.name}__float"], to=_FLOAT,
                                             name=f"{value.name}__float"))
    casts_out = []
    for value in graph.output:
        if value.type.tensor_type.elem_type == _HALF:
            _rename_outputs(graph, value.name, f"{value.name}__float")
            casts_out.append(helper.make_node("Cast", [f"{value.name}__float"], [value.name], to=_HALF,
                                              name=f"{value.name}__half"))
    nodes = [*casts_in, *graph.node, *casts_out]
    del graph.node[:]
    graph.node.extend(nodes)
    return widened


def _has_half(graph: onnx.GraphProto) -> bool:
    values = [*graph.input, *graph.output, *graph.value_info]
    return (any(v.type.tensor_type.elem_type == _HALF for v in values)
            or any(t.data_type == _HALF for t in graph.initializer)
            or any(_names_half(a) or any(map(_has_half, _subgraphs(a))) for n in graph.node for a in n.attribute))


def _names_half(attribute: onnx.AttributeProto) -> bool:
    """A float16 tensor (a Constant's value) or a float16 type (a Cast's `to`)."""
    return (attribute.type == onnx.AttributeProto.TENSOR and attribute.t.data_type == _HALF
            or attribute.type == onnx.AttributeProto.INT and attribute.name in ("to", "dtype") and attribute.i == _HALF)


def _subgraphs(attribute: onnx.AttributeProto) -> list[onnx.GraphProto]:
    return [attribute.g] if attribute.type == onnx.AttributeProto.GRAPH else list(attribute.graphs)


def _float_tensor(tensor: onnx.TensorProto) -> onnx.TensorProto:
    return numpy_helper.from_array(numpy_helper.to_array(tensor).astype("float32"), tensor.name)


def _widen(graph: onnx.GraphProto, top: bool = True) -> None:
    """Every float16 tensor inside `graph` (and its subgraphs) as float32; a subgraph's inputs
    and outputs too, the top graph's stay as the caller sees them."""
    for index, tensor in enumerate(graph.initializer):
        if tensor.data_type == _HALF:
            graph.initializer[index].CopyFrom(_float_tensor(tensor))
    values = [*graph.value_info, *([] if top else [*graph.input, *graph.output])]
    for value in values:
        if value.type.tensor_type.elem_type == _HALF:
            value.type.tensor_type.elem_type = _FLOAT
    for node in graph.node:
        for attribute in node.attribute:
            if _names_half(attribute):
                if attribute.type == onnx.AttributeProto.TENSOR:
                    attribute.t.CopyFrom(_float_tensor(attribute.t))
                else:
                    attribute.i = _FLOAT
            for subgraph in _subgraphs(attribute):
                _widen(subgraph, top=False)


def _rename_uses(graph: onnx.GraphProto, old: str, new: str) -> None:
    """Every node reading `old`, in `graph` and the subgraphs that see it, reads `new`."""
    for node in graph.node:
        node.input[:] = [new if name == old else name for name in node.input]
        for attribute in node.attribute:
            for subgraph in _subgraphs(attribute):
                if old not in {v.name for v in subgraph.input} | {t.name for t in subgraph.initializer}:
                    _rename_uses(subgraph, old, new)


def _rename_outputs(graph: onnx.GraphProto, old: str, new: str) -> None:
    """The node producing `old` produces `new`, and every reader reads it."""
    for node in graph.node:
        node.output[:] = [new if name == old else name for name in node.output]
    _rename_uses(graph, old, new)
