"""Read an ONNX model from a path, bytes or a ModelProto, with errors a user can act on."""

from __future__ import annotations

import os
from pathlib import Path

import onnx
from google.protobuf.message import DecodeError

from ..errors import ModelLoadError
from .branches import all_nodes, branches


def _parse(data: bytes, where: str) -> onnx.ModelProto:
    model = onnx.ModelProto()
    try:
        model.ParseFromString(data)
    except (DecodeError, RuntimeError, ValueError) as error:
        raise ModelLoadError(
            f"{where} is not a readable ONNX model ({len(data)} bytes): the protobuf does not "
            f"parse ({error}); the file may be truncated or not ONNX at all"
        ) from None
    if not model.HasField("graph") or not model.graph.node:
        raise ModelLoadError(
            f"{where} parsed as protobuf but holds no ONNX graph ({len(data)} bytes): "
            "the file is probably truncated or not an ONNX model"
        )
    return model


def _with_output_shapes(model: onnx.ModelProto) -> onnx.ModelProto:
    """`model`, its graph outputs that declare a tensor type but no shape given the shapes
    ONNX's shape inference finds (the checker requires one; ONNX Runtime runs such a model)."""
    outputs = [o.type.tensor_type for o in model.graph.output if o.type.HasField("tensor_type")]
    if all(output.HasField("shape") for output in outputs):
        return model
    try:
        return onnx.shape_inference.infer_shapes(model)
    except (onnx.shape_inference.InferenceError, ValueError):
        return model  # the checker names what is wrong


def load_model(source) -> onnx.ModelProto:
    """Return the ModelProto for `source`: a path, serialized bytes, or a ModelProto.

    External data next to a model file is loaded too. Raises ModelLoadError for a missing file,
    a file that is not ONNX, a truncated file, or a model the ONNX checker rejects.
    """
    if isinstance(source, onnx.ModelProto):
        model, where = source, "the given ModelProto"
    elif isinstance(source, (bytes, bytearray, memoryview)):
        model, where = _parse(bytes(source), "the given bytes"), "the given bytes"
    elif isinstance(source, (str, os.PathLike)):
        path = Path(source)
        where = str(path)
        if not path.exists():
            raise ModelLoadError(f"model file {where} does not exist")
        if path.is_dir():
            raise ModelLoadError(f"model path {where} is a directory, not an ONNX file")
        model = _parse(path.read_bytes(), where)
        try:
            onnx.external_data_helper.load_external_data_for_model(model, str(path.parent))
        except (OSError, ValueError) as error:
            raise ModelLoadError(f"cannot load the external data of {where}: {error}") from None
    else:
        raise ModelLoadError(
            f"a model is a path, bytes or onnx.ModelProto, not {type(source).__name__}"
        )

    model = _with_output_shapes(model)
    try:
        onnx.checker.check_model(model)
    except (onnx.checker.ValidationError, ValueError) as error:
        raise ModelLoadError(f"{where} is not a valid ONNX model: {error}") from None
    if not model.graph.output:
        raise ModelLoadError(f"{where} has no graph outputs: there is nothing to compute")
    return _named(_unknown_dims_symbolic(model, where))


def _unknown_dims_symbolic(model: onnx.ModelProto, where: str) -> onnx.ModelProto:
    """`model`, or a copy whose -1 dims (exporters such as paddle2onnx write -1 for a dynamic
    batch) are symbolic, as ONNX Runtime reads them: a named dim on an input, an unknown one
    elsewhere. Any other negative dim is an error naming the tensor and axis."""
    values = [*model.graph.input, *model.graph.output, *model.graph.value_info]
    negative = [(value.name, axis, dim.dim_value) for value in values
                for axis, dim in enumerate(value.type.tensor_type.shape.dim)
                if dim.HasField("dim_value") and dim.dim_value < 0]
    if not negative:
        return model
    bad = [(name, axis, size) for name, axis, size in negative if size != -1]
    if bad:
        name, axis, size = bad[0]
        raise ModelLoadError(f"{where}: tensor {name!r} has the dim {size} at axis {axis}; a dim is a "
                             "size >= 0, a name, or -1 for unknown")
    fixed = onnx.ModelProto()
    fixed.CopyFrom(model)
    inputs = {value.name for value in fixed.graph.input}
    for value in [*fixed.graph.input, *fixed.graph.output, *fixed.graph.value_info]:
        for axis, dim in enumerate(value.type.tensor_type.shape.dim):
            if dim.HasField("dim_value") and dim.dim_value == -1:
                dim.Clear()
                if value.name in inputs:
                    dim.dim_param = f"{value.name}_dim{axis}"
    return fixed


def _named(model: onnx.ModelProto) -> onnx.ModelProto:
    """`model`, or a copy whose unnamed nodes are named `OpType#index` (their place in the
    graph; in an If branch, after the If: `If_0/then_branch/Mul#3`), so reports and errors can
    name every node the user gave."""
    if all(node.name for node in all_nodes(model)):
        return model
    named = onnx.ModelProto()
    named.CopyFrom(model)

    def name(graph, prefix):
        for index, node in enumerate(graph.node):
            node.name = node.name or f"{prefix}{node.op_type}#{index}"
            for attribute, branch in branches(node):
                name(branch, f"{node.name}/{attribute}/")

    name(named.graph, "")
    return named
