"""ONNX -> Relax: TVM's importer, with input shapes fixed by the user and errors that name the node.

TVM's `from_onnx` prints the failing operator's inputs to stdout and re-raises whatever the
converter threw; we wrap each conversion so the error names the ONNX node and op instead.
"""

from __future__ import annotations

import contextlib
import io
import warnings
from dataclasses import dataclass

import numpy as np
import onnx
import tvm
from tvm import relax
from tvm.relax.frontend.onnx.onnx_frontend import ONNXGraphImporter

from .. import provenance
from ..errors import CompileError, InputError
from .batch import rebatch
from .converters import CONVERTERS
from .support import check_supported, default_opset


@dataclass(frozen=True)
class TensorInfo:
    """A model input or output as ONNX Runtime's `NodeArg` shows it: symbolic dims are names."""

    name: str
    shape: tuple[int | str, ...]
    dtype: str  # numpy name, e.g. "float32"
    # For integer inputs that index a constant table (token ids into an embedding): the table's
    # length n; values must lie in [-n, n), since compiled gathers do not check bounds.
    index_limit: int | None = None

    @property
    def type(self) -> str:
        """ONNX Runtime's spelling of the type, e.g. `tensor(float)`."""
        onnx_type = onnx.helper.np_dtype_to_tensor_dtype(np.dtype(self.dtype))
        return f"tensor({onnx.TensorProto.DataType.Name(onnx_type).lower()})"


def _dims(value: onnx.ValueInfoProto) -> tuple[int | str, ...]:
    dims = value.type.tensor_type.shape.dim
    return tuple(d.dim_value if d.HasField("dim_value") else (d.dim_param or "?") for d in dims)


def _dtype(value: onnx.ValueInfoProto) -> str:
    return onnx.helper.tensor_dtype_to_np_dtype(value.type.tensor_type.elem_type).name


def _index_limits(graph: onnx.GraphProto) -> dict[str, int]:
    """Inputs used directly as Gather indices into an initializer -> the gathered axis' length."""
    tables = {t.name: list(t.dims) for t in graph.initializer}
    limits: dict[str, int] = {}
    for node in graph.node:
        if node.op_type == "Gather" and node.input[0] in tables:
            axis = next((a.i for a in node.attribute if a.name == "axis"), 0)
            length = tables[node.input[0]][axis]
            limits[node.input[1]] = min(length, limits.get(node.input[1], length))
    return limits


def graph_inputs(model: onnx.ModelProto) -> list[TensorInfo]:
    """The inputs a caller feeds; initializers listed as inputs (IR version 3) are weights."""
    weights = {t.name for t in model.graph.initializer}
    limits = _index_limits(model.graph)
    return [
        TensorInfo(v.name, _dims(v), _dtype(v), limits.get(v.name))
        for v in model.graph.input
        if v.name not in weights
    ]


def set_input_shapes(model: onnx.ModelProto, shapes: dict[str, tuple[int, ...]]) -> onnx.ModelProto:
    """A copy of `model` whose inputs have the static `shapes`. Symbolic dims may change, and
    a fixed batch (axis 0) where the graph allows it (`batch.rebatch`)."""
    inputs = {info.name: info for info in graph_inputs(model)}
    unknown = sorted(set(shapes) - set(inputs))
    if unknown:
        raise InputError(f"input_shapes names unknown input(s) {unknown}; the model's inputs are {sorted(inputs)}")
    fixed = onnx.ModelProto()
    fixed.CopyFrom(model)
    batches = {}
    for value in fixed.graph.input:
        if value.name not in shapes:
            continue
        shape = tuple(int(d) for d in shapes[value.name])
        declared = inputs[value.name].shape
        if len(shape) != len(declared):
            raise InputError(f"input {value.name!r} has rank {len(declared)} {declared}, but input_shapes gives {shape}")
        for axis, (want, have) in enumerate(zip(shape, declared)):
            if want < 0:
                raise InputError(f"input_shapes[{value.name!r}] has a negative dim {want} at axis {axis}")
            if isinstance(have, int) and have != want:
                if axis != 0:
                    raise InputError(
                        f"input {value.name!r} has the fixed dim {have} at axis {axis}; input_shapes asks "
                        f"for {want}, but only symbolic dims and the batch (axis 0) can be overridden")
                batches[value.name] = want
        for axis, (dim, want) in enumerate(zip(value.type.tensor_type.shape.dim, shape)):
            if axis != 0 or value.name not in batches:
                dim.dim_value = want
    return rebatch(fixed, batches) if batches else fixed


class _NodeBuilder:
    """The importer's block builder while one ONNX node converts: every binding it emits,
    nested calls included, is named after the node (see `provenance`)."""

    def __init__(self, builder: relax.BlockBuilder, name: str):
        self._builder = builder
        self._name = name
        self._emitted: dict = {}  # nested call -> its variable: converters share sub-expressions

    def __getattr__(self, attr):
        return getattr(self._builder, attr)

    def emit(self, expr, name_hint=""):
        return self._builder.emit(self.bind_nested(expr), self._name)

    def normalize(self, expr):
        return self._builder.normalize(self.bind_nested(expr))

    def bind_nested(self, expr):
        """`expr` with its unbound nested calls emitted under the node's name, innermost first
        (the builder would otherwise emit them itself, unnamed)."""
        if isinstance(expr, relax.Call):
            args = [self._bound(arg) for arg in expr.args]
            return relax.Call(expr.op, args, expr.attrs, expr.ty_args, expr.span)
        if isinstance(expr, relax.Tuple):
            return relax.Tuple([self._bound(field) for field in expr.fields])
        if isinstance(expr, relax.TupleGetItem):
            return relax.TupleGetItem(self._bound(expr.tuple_value), expr.index)
        return expr

    def _bound(self, expr):
        if not isinstance(expr, relax.Call | relax.TupleGetItem):
            return self.bind_nested(expr)
        if expr not in self._emitted:
            self._emitted[expr] = self._builder.emit(self.bind_nested(expr), self._name)
        return self._emitted[expr]


class _NamingImporter(ONNXGraphImporter):
    """TVM's importer, but bindings carry their ONNX node and a failing conversion names it."""

    def __init__(self, graph: onnx.GraphProto, **kwargs):
        super().__init__(**kwargs)
        self._node_indices = {tuple(node.output): i for i, node in enumerate(graph.node)}
        self._current_node: int | None = None

    def _check_for_unsupported_ops(self, graph):
        """Done before import by `support.check_supported`, which knows our converters too."""

    def _parse_value_proto(self, value_proto):
        if isinstance(value_proto, onnx.NodeProto):  # called once per node, just before converting it
            self._current_node = self._node_indices.get(tuple(value_proto.output))
        return super()._parse_value_proto(value_proto)

    def _convert_operator(self, op_name, inputs, attrs, opset):
        builder = self.bb
        if self._current_node is not None:
            self.bb = _NodeBuilder(builder, provenance.tag(self._current_node))
        try:
            ours = CONVERTERS.get(op_name)
            converted = ours(self.bb, inputs, attrs, opset) if ours else None
            if converted is None:
                converted = super()._convert_operator(op_name, inputs, attrs, opset)
            if isinstance(self.bb, _NodeBuilder) and isinstance(converted, relax.Call):
                converted = self.bb.emit(converted)
                if isinstance(converted.ty, relax.TupleType):  # unpack here, so the items are named too
                    fields = range(len(converted.ty.fields))
                    converted = relax.Tuple([self.bb.emit(relax.TupleGetItem(converted, i)) for i in fields])
            return converted
        except Exception as error:
            node = attrs.get("tvm_custom", {}).get("name", "?")
            raise CompileError(
                f"cannot import ONNX node {node!r} (op {op_name}, opset {opset}): "
                f"{type(error).__name__}: {error}"
            ) from error
        finally:
            self.bb = builder


def import_onnx(model: onnx.ModelProto) -> tvm.IRModule:
    """Relax module for `model`, with the weights as constants."""
    check_supported(model)
    importer = _NamingImporter(model.graph, shape_dict=None, dtype_dict="float32", keep_params_in_input=False)
    try:
        # The importer prints a failing node's inputs; the CompileError says what matters.
        with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return importer.from_onnx(model.graph, default_opset(model))
    except CompileError:
        raise
    except Exception as error:
        raise CompileError(f"cannot import the ONNX graph: {type(error).__name__}: {error}") from error


def relax_outputs(mod: tvm.IRModule, model: onnx.ModelProto) -> list[TensorInfo]:
    """The outputs of `model` with the shapes and dtypes the Relax import inferred."""
    returned = mod["main"].ret_ty
    fields = list(returned.fields) if isinstance(returned, relax.TupleType) else [returned]
    infos = []
    for value, field in zip(model.graph.output, fields):
        if field.shape is None:  # computed at run time (an Expand to a shape fed in): as declared
            shape = _dims(value)
        else:
            shape = tuple(int(d) if isinstance(d, tvm.tirx.IntImm) else str(d) for d in field.shape)
        infos.append(TensorInfo(value.name, shape, str(field.dtype)))
    return infos
