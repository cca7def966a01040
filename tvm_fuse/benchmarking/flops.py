"""FLOPs of an ONNX model: 2 x the multiply-accumulates of its Conv, Gemm and MatMul nodes.

Shapes come from `onnx.shape_inference.infer_shapes`, so every dim they need must be static
(fix symbolic ones first, e.g. build the named models with a batch). Biases, activations,
pooling, normalization and softmax are not counted: in the CNNs and encoders benchmarked here
they are a few percent of the work, and leaving them out makes "GFLOP/s" mean the same thing
as the FMA peak it is compared with.
"""

from __future__ import annotations

import math

import onnx
from onnx import helper, shape_inference

FLOP_OPS = ("Conv", "Gemm", "MatMul")


def tensor_shapes(model: onnx.ModelProto) -> dict[str, list]:
    """Name -> shape (ints, or dim_param strings / None where not static) of every tensor."""
    # Inference serializes the model: show it large weights as inputs of their shape (only
    # their shapes matter), and keep small initializers, which may be Reshape's target shapes.
    source = model.graph
    large = [t for t in source.initializer if math.prod(t.dims) > 64]
    large_names = {t.name for t in large}
    inputs = {i.name for i in source.input}  # older models list their initializers as inputs too
    graph = helper.make_graph(
        source.node, source.name,
        [*source.input, *(helper.make_tensor_value_info(t.name, t.data_type, t.dims)
                          for t in large if t.name not in inputs)],
        source.output, [t for t in source.initializer if t.name not in large_names],
        value_info=source.value_info)
    stub = helper.make_model(graph, opset_imports=model.opset_import, ir_version=model.ir_version)
    graph = shape_inference.infer_shapes(stub, data_prop=True).graph
    shapes = {t.name: list(t.dims) for t in graph.initializer}
    for info in (*graph.input, *graph.value_info, *graph.output):
        if info.type.HasField("tensor_type") and info.type.tensor_type.HasField("shape"):
            dims = info.type.tensor_type.shape.dim
            shapes[info.name] = [d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in dims]
    return shapes


def _attribute(node: onnx.NodeProto, name: str, default: int) -> int:
    return next((a.i for a in node.attribute if a.name == name), default)


def node_macs(node: onnx.NodeProto, shapes: dict[str, list]) -> int:
    """Multiply-accumulates of one Conv, Gemm or MatMul node (0 for other ops)."""
    if node.op_type not in FLOP_OPS:
        return 0
    needed = [node.input[0], node.input[1], node.output[0]]
    found = [shapes.get(name) for name in needed]
    if any(s is None or not all(isinstance(d, int) and d > 0 for d in s) for s in found):
        raise ValueError(f"{node.op_type} node {node.name!r}: static shapes needed, got "
                         + ", ".join(f"{n}: {s}" for n, s in zip(needed, found)))
    a, w, out = found
    if node.op_type == "Conv":  # out [N, M, *spatial], w [M, C/group, *kernel]
        return math.prod(out) * math.prod(w[1:])
    if node.op_type == "Gemm":  # out [M, N]; A [M, K], or [K, M] with transA
        return math.prod(out) * (a[0] if _attribute(node, "transA", 0) else a[1])
    return math.prod(out) * a[-1]  # MatMul, numpy semantics: K is A's last dim


def model_flops(model: onnx.ModelProto) -> int:
    """2 x the multiply-accumulates of the model's Conv, Gemm and MatMul nodes (top graph)."""
    shapes = tensor_shapes(model)
    return 2 * sum(node_macs(node, shapes) for node in model.graph.node)
