"""A new batch for a model exported with a fixed one: the constants that pin it rewritten,
the result checked by ONNX's shape inference.

Exporters often write batch 1 into the graph: the input's shape, and the shape constants of the
Reshapes before a classifier (`[1, 2048]`) or inside a channel shuffle (`[1, 4, 28, 56, 56]`). To
find which constants mean the batch, the inputs' batch dims are made symbolic and ONNX's shape
inference follows them: a Reshape whose data carries a batch symbol at axis 0 and whose constant
shape starts with the old batch gets `0` there ("copy the input's dim"). Any other node whose
input carries the batch but whose output has the old batch as a number pins it: the model is
refused with an error naming that node, never rebatched wrongly.
"""

from __future__ import annotations

import onnx
from onnx import helper, numpy_helper

from ..errors import InputError
from .fixups import constant_values

_SYMBOL = "tvm_fuse_batch_of_"
_SHAPE_OPS = {"Shape", "Size"}  # their outputs describe the batch, they do not carry it


def rebatch(model: onnx.ModelProto, batches: dict[str, int]) -> onnx.ModelProto:
    """A copy of `model` whose inputs `batches` (name -> new batch) have that size at axis 0.

    Raises InputError naming the node when the graph pins the old batch elsewhere, or when
    ONNX's shape inference rejects the rebatched graph.
    """
    old = {value.name: value.type.tensor_type.shape.dim[0].dim_value
           for value in model.graph.input if value.name in batches}
    rewritten = _with_batch_dims(model, {name: _SYMBOL + name for name in batches})
    while True:  # a freed Reshape lets the batch reach the next one
        dims = _inferred_dims(rewritten)
        rewritten, freed = _free_reshapes(rewritten, old, dims)
        if not freed:
            break
    _refuse_pins(rewritten, old, dims)
    rebatched = _with_batch_dims(rewritten, batches)
    inferred = _inferred(rebatched)  # strict: any shape the new batch contradicts raises here
    for value, shaped in zip(rebatched.graph.output, inferred.graph.output):
        value.type.CopyFrom(shaped.type)
    return rebatched


def _with_batch_dims(model: onnx.ModelProto, dims: dict[str, int | str]) -> onnx.ModelProto:
    """A copy with axis 0 of the inputs `dims` set to a size or a symbol, and every recorded
    intermediate and output shape dropped (shape inference redoes them)."""
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    del copy.graph.value_info[:]
    for value in copy.graph.output:
        value.type.tensor_type.ClearField("shape")
    for value in copy.graph.input:
        if value.name in dims:
            dim = value.type.tensor_type.shape.dim[0]
            dim.Clear()
            if isinstance(dims[value.name], str):
                dim.dim_param = dims[value.name]
            else:
                dim.dim_value = dims[value.name]
    return copy


def _inferred(model: onnx.ModelProto) -> onnx.ModelProto:
    try:
        return onnx.shape_inference.infer_shapes(model, strict_mode=True, data_prop=True)
    except (onnx.shape_inference.InferenceError, onnx.checker.ValidationError) as error:
        raise InputError(f"the model does not take the new batch: ONNX shape inference says {error}") from None


def _inferred_dims(model: onnx.ModelProto) -> dict[str, list[int | str | None]]:
    """Tensor name -> its dims (a size, a symbol, or None for unknown) by ONNX's shape inference."""
    inferred = _inferred(model)
    values = [*inferred.graph.input, *inferred.graph.value_info, *inferred.graph.output]
    return {value.name: [d.dim_value if d.HasField("dim_value") else (d.dim_param or None)
                         for d in value.type.tensor_type.shape.dim]
            for value in values if value.type.tensor_type.HasField("shape")}


def _batch_input(dims: list | None) -> str | None:
    """The input whose batch symbol is axis 0 of `dims`, if any."""
    if dims and isinstance(dims[0], str) and dims[0].startswith(_SYMBOL):
        return dims[0][len(_SYMBOL):]
    return None


def _free_reshapes(model: onnx.ModelProto, old: dict[str, int], dims: dict) -> tuple[onnx.ModelProto, int]:
    """Reshapes of batch-carrying data whose constant shape starts with the old batch: `0`
    there; and how many were changed."""
    constants = constant_values(model.graph)
    nodes, freed = [], 0
    for node in model.graph.node:
        source = _batch_input(dims.get(node.input[0])) if node.op_type == "Reshape" else None
        shape = constants.get(node.input[1]) if source else None
        allow_zero = any(a.name == "allowzero" and a.i for a in node.attribute)
        if shape is None or allow_zero or shape.size == 0 or shape[0] != old[source]:
            nodes.append(node)
            continue
        copied = shape.copy()
        copied[0] = 0
        name = f"{node.output[0]}_batch_copied_shape"
        nodes.append(helper.make_node("Constant", [], [name], name=name, value=numpy_helper.from_array(copied)))
        reshape = onnx.NodeProto()
        reshape.CopyFrom(node)
        reshape.input[1] = name
        nodes.append(reshape)
        freed += 1
    rewritten = onnx.ModelProto()
    rewritten.CopyFrom(model)
    del rewritten.graph.node[:]
    rewritten.graph.node.extend(nodes)
    return rewritten, freed


def _refuse_pins(model: onnx.ModelProto, old: dict[str, int], dims: dict) -> None:
    """InputError for the first node that takes a batch-carrying input and gives an output whose
    axis 0 is the old batch as a plain number."""
    for node in model.graph.node:
        if node.op_type in _SHAPE_OPS:
            continue
        sources = {s for s in (_batch_input(dims.get(name)) for name in node.input) if s}
        for source in sources:
            batch = old[source]
            pinned = [out for out in node.output if (dims.get(out) or [None])[0] == batch]
            if pinned and not any(_batch_input(dims.get(out)) for out in node.output):
                raise InputError(
                    f"node {node.name!r} ({node.op_type}) pins the batch of input {source!r} to "
                    f"{batch} (its output {pinned[0]!r} keeps axis 0 = {batch}): this model's batch cannot be changed")
