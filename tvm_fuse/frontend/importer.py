"""ONNX -> Relax: TVM's importer, with input shapes fixed by the user and errors that name the node.

TVM's `from_onnx` prints the failing operator's inputs to stdout and re-raises whatever the
converter threw; we wrap each conversion so the error names the ONNX node and op instead.
"""

from __future__ import annotations

import contextlib
import io
import math
import warnings

import numpy as np
import onnx
import tvm
from onnx import numpy_helper
from tvm import relax
from tvm.ir.expr import GenericConst
from tvm.relax.expr_functor import PyExprMutator, mutator
from tvm.relax.frontend.onnx.onnx_frontend import ONNXGraphImporter

from .. import provenance
from ..errors import CompileError, InputError, ModelLoadError
from ..ir_names import BRANCH_ATTR, UNBUILT_ATTR, UNBUILT_NODES_ATTR
from ..tensor_info import MAX_ELEMENTS, TensorInfo, symbolic_dims, symbolic_dims_hint
from .attributes import node_name, refuse
from .batch import rebatch
from .branches import branch_model, branches, graph_key, node_count, node_numbers, numbered_graphs, outer_names
from .converters import CONVERTERS
from .fixups import apply_fixups
from .shape_arithmetic import folded
from .slicing import dims_in_range
from .support import check_supported, default_opset


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


def graph_inputs(model: onnx.ModelProto, dim_limits=()) -> list[TensorInfo]:
    """The inputs a caller feeds; initializers listed as inputs (IR version 3) are weights.
    `dim_limits`: (symbolic dim, its largest size, the node that assumed it), from the import
    (`slicing.assumed_limits`), each on the inputs that have that dim, the smallest kept."""
    weights = {t.name for t in model.graph.initializer}
    limits = _index_limits(model.graph)
    smallest: dict[str, tuple[str, int, str]] = {}
    for dim, largest, node in dim_limits:
        if dim not in smallest or largest < smallest[dim][1]:
            smallest[dim] = (dim, largest, node)
    infos = []
    for v in model.graph.input:
        if v.name not in weights:
            dims = _dims(v)
            infos.append(TensorInfo(v.name, dims, _dtype(v), limits.get(v.name),
                                    tuple(smallest[d] for d in dict.fromkeys(dims) if d in smallest)))
    return infos


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


def check_input_sizes(model: onnx.ModelProto) -> None:
    """Refuse, naming the input and axis, static input shapes no run could serve: a size of 0
    (an empty tensor, which ops that need a size cannot take) or more than `MAX_ELEMENTS`
    elements (TVM would spend minutes on the shapes before failing)."""
    for info in graph_inputs(model):
        static = [(axis, dim) for axis, dim in enumerate(info.shape) if isinstance(dim, int)]
        for axis, dim in static:
            if dim == 0:
                raise InputError(f"input {info.name!r} {info.shape} has size 0 at axis {axis}: tvm_fuse builds "
                                 "no model for empty tensors; give it a size with input_shapes")
        elements = math.prod(dim for _, dim in static)
        if elements > MAX_ELEMENTS:
            axis, dim = max(static, key=lambda axis_dim: axis_dim[1])
            raise InputError(f"input {info.name!r} {info.shape} has {elements} elements, more than the "
                             f"{MAX_ELEMENTS} a tensor may have (its axis {axis} has size {dim}); "
                             "give it a smaller size with input_shapes")


def _never_positive(dim: tvm.tirx.PrimExpr) -> bool:
    """`dim` <= 0 for every size >= 1 of the symbolic dims in it (Relax types an empty slice's
    dim as -1, or as an expression of them that is)."""
    with dims_in_range([dim]) as analyzer:
        return analyzer.can_prove(dim <= 0)


# Ops whose inputs ONNX types alike: a float scalar the import computed from shapes (a prim
# value, float64 where TVM's converters did arithmetic on it: torch's `/ head_dim ** 0.5` over a
# symbolic shape) takes the dtype of the op's float tensor, and a constant one becomes a tensor.
_SAME_TYPED_OPS = frozenset({"Add", "Sub", "Mul", "Div", "Max", "Min", "Mean", "Sum", "Where", "Equal", "Less",
                             "Greater", "LessOrEqual", "GreaterOrEqual", "Mod"})


def _prims_as_tensors_dtype(inputs: list) -> None:
    dtypes = {str(x.ty.dtype) for x in inputs if isinstance(getattr(x, "ty", None), relax.TensorType)
              and str(x.ty.dtype).startswith("float")}
    if len(dtypes) != 1:
        return
    dtype, = dtypes
    for i, x in enumerate(inputs):
        if isinstance(x, tvm.tirx.FloatImm):  # a constant: a scalar tensor, as the passes read operands
            inputs[i] = relax.const(np.array(x.value, dtype))
        elif tvm.ir.is_prim_expr(x) and str(x.ty).startswith("float") and str(x.ty) != dtype:
            inputs[i] = x.astype(dtype)


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


class _NotATensor(Exception):
    """An If branch reads an outer value that cannot be a function parameter."""


@mutator
class _RenamedGlobals(PyExprMutator):
    def __init__(self, names: dict):
        super().__init__()
        self._names = names

    def visit_global_var_(self, op):
        return self._names.get(op, op)




def graph_functions(mod: tvm.IRModule) -> list[relax.Function]:
    """The functions that hold the model's graph: `main`, then every If branch."""
    return [mod["main"], *(f for _, f in mod.functions_items()
                           if isinstance(f, relax.Function) and f.attrs and BRANCH_ATTR in f.attrs)]


class _NamingImporter(ONNXGraphImporter):
    """TVM's importer, but bindings carry their ONNX node, a failing conversion names it, and an
    If's branches are functions of their own."""

    def __init__(self, model: onnx.ModelProto, root: relax.BlockBuilder | None = None,
                 numbers: dict | None = None, first_numbers: dict | None = None):
        super().__init__(shape_dict=None, dtype_dict="float32", keep_params_in_input=False)
        self._model = model
        self._root = root or self.bb  # where branch functions go: the builder of the whole module
        # Nodes are numbered in the user's model (`branches.numbered_graphs`): a branch's nodes
        # by their outputs, which its fix-ups keep; sibling branches may reuse output names.
        self._node_numbers = numbers if numbers is not None else node_numbers(model.graph)
        # Branches only: keying the main graph would serialize its weights.
        self._first_numbers = first_numbers if first_numbers is not None else {
            graph_key(graph): first for graph, first in numbered_graphs(model.graph) if graph is not model.graph}
        self._current_node: int | None = None
        self._current_node_proto: onnx.NodeProto | None = None
        self._current_if = ""
        self._branch_calls: dict[bytes, relax.Call] = {}  # graph_key -> the call that runs it

    def _static_shapes_hint(self, error: Exception) -> str:
        """What to do when a node fails on symbolic input dims (needs as a shape a tensor computed from them)."""
        inputs = graph_inputs(self._model)
        named = symbolic_dims(inputs)
        if not named or not any(word in str(error) for word in ("Shape", "Dynamic", "computed at run time")):
            return symbolic_dims_hint(inputs)
        return (f". Its shape is computed at run time from the inputs' symbolic dims ({named}): "
                f"give them the sizes you will feed with build(..., input_shapes={{name: shape}})")

    def _check_for_unsupported_ops(self, graph):
        """Done before import by `support.check_supported`, which knows our converters too."""

    def _parse_value_proto(self, value_proto):
        if isinstance(value_proto, onnx.NodeProto):  # called once per node, just before converting it
            self._current_node = self._node_numbers.get(tuple(value_proto.output))
            self._current_node_proto, self._current_if = value_proto, value_proto.name
        name = super()._parse_value_proto(value_proto)
        value = self._nodes.get(name) if isinstance(value_proto, onnx.ValueInfoProto) else None
        # A graph output that the import computed as a shape, or one of its dims: an int64 tensor.
        if isinstance(getattr(value, "ty", None), relax.ShapeType):
            self._nodes[name] = self.bb.emit(relax.op.shape_to_tensor(value))
        elif tvm.ir.is_prim_expr(value) and str(value.ty).startswith("int"):
            dim = relax.op.shape_to_tensor(relax.ShapeExpr([value.astype("int64")]))
            self._nodes[name] = self.bb.emit(relax.op.reshape(dim, ()))
        return name

    def _convert_subgraph(self, bb, graph):
        """An If's branch as a function of its own, called from the If: a dataflow graph that the
        passes fuse and block like the main one, and that runs only when taken (TVM's importer
        would bind its nodes before the If, so both branches ran). A branch that cannot be built
        for the model's input shapes (Silero's 8 kHz model fed a 16 kHz chunk) raises an error
        when taken. TVM's inline form is kept where the branch reads an outer value that is not a
        tensor of known rank (a shape value)."""
        key = graph_key(graph)
        if key in self._branch_calls:
            return self._branch_calls[key]
        try:
            call = self._branch_call(graph)
        except _NotATensor:
            return super()._convert_subgraph(bb, graph)
        except CompileError as error:
            other = next((g for _, g in branches(self._current_node_proto) if graph_key(g) != key), None)
            if other is None:
                raise
            ty = self._convert_subgraph(bb, other).ty  # raises if neither branch builds
            call = self._failing_branch(graph, ty, error)
            if call is None:
                raise
        self._branch_calls[key] = call
        return call

    def _branch_call(self, graph: onnx.GraphProto) -> relax.Call:
        params, inputs, initializers = [], [], []
        for name in outer_names(graph):
            value = self._nodes.get(name)
            if isinstance(value, GenericConst):
                initializers.append(numpy_helper.from_array(value.value.numpy(), name))
                continue
            ty = value.ty if isinstance(value, relax.Expr) else None
            if not (isinstance(ty, relax.TensorType) and ty.shape is not None
                    and all(isinstance(d, tvm.tirx.IntImm | tvm.tirx.Var) for d in ty.shape)):
                raise _NotATensor(name)
            dims = [int(d) if isinstance(d, tvm.tirx.IntImm) else d.name for d in ty.shape]
            inputs.append(onnx.helper.make_tensor_value_info(
                name, onnx.helper.np_dtype_to_tensor_dtype(np.dtype(str(ty.dtype))), dims))
            params.append(value)
        branch = apply_fixups(branch_model(graph, inputs, initializers, self._model.opset_import))
        first = self._first_numbers.get(graph_key(graph), 0)
        importer = _NamingImporter(branch, self._root, node_numbers(graph, first), self._first_numbers)
        imported = importer.from_onnx(branch.graph, self.opset)
        # Its kernels (converters' TE functions) move to the module being built, perhaps renamed.
        renamed = _RenamedGlobals({gvar: self._root.add_func(f, gvar.name_hint)
                                   for gvar, f in imported.functions_items() if gvar.name_hint != "main"})
        func = renamed.visit_expr(imported["main"])
        return self._call_branch(func.without_attr("global_symbol").without_attr("num_input"), graph, params)

    def _failing_branch(self, graph: onnx.GraphProto, ty, error: CompileError) -> relax.Call | None:
        """A branch that raises `error` when taken, returning zeros of the other branch's
        type `ty` to type-check; None if that type has no static shape."""
        fields = list(ty.fields) if isinstance(ty, relax.TupleType) else [ty]
        if not all(isinstance(f, relax.TensorType) and f.shape is not None
                   and all(isinstance(d, tvm.tirx.IntImm) for d in f.shape) for f in fields):
            return None
        builder = relax.BlockBuilder()
        with builder.function("branch", params=[], pure=False):
            message = (f"the {graph.name or 'branch'} of If {self._current_if!r} cannot run on inputs "
                       f"of the shapes this model was built for: {error}")
            builder.emit(relax.op.assert_op(relax.const(False), [], message.replace("{", "{{").replace("}", "}}")))
            zeros = [builder.emit(relax.op.zeros(f.shape, str(f.dtype))) for f in fields]
            builder.emit_func_output(relax.Tuple(zeros) if isinstance(ty, relax.TupleType) else zeros[0])
        func = builder.get()["branch"].without_attr("global_symbol").with_attr(UNBUILT_ATTR, message)
        first = self._first_numbers.get(graph_key(graph))
        if first is not None:
            func = func.with_attr(UNBUILT_NODES_ATTR, [first, first + node_count(graph)])
        return self._call_branch(func, graph, [])

    def _call_branch(self, func: relax.Function, graph: onnx.GraphProto, args: list) -> relax.Call:
        func = func.with_attr(BRANCH_ATTR, self._current_if)
        gvar = self._root.add_func(func, f"{self._current_if or 'if'}_{graph.name}")
        return self._root.normalize(relax.Call(gvar, args))

    @staticmethod
    def _refuse_empty(converted, op_name: str, attrs: dict, opset: int) -> None:
        """A node computing an empty float tensor at run time (a Slice or Resize to size 0; for
        every size of its symbolic dims, which a run feeds >= 1) is refused: TVM's kernels for it
        fail to compile or allocate a negative size. Empty constants (a Resize's roi) are data."""
        fields = converted.fields if isinstance(converted, relax.Tuple) else [converted]
        for field in fields:
            ty = getattr(field, "ty", None)
            if isinstance(field, relax.Var) and isinstance(ty, relax.TensorType) and ty.shape is not None \
                    and str(ty.dtype).startswith(("float", "bfloat")) and any(map(_never_positive, ty.shape)):
                shape = [max(int(d), 0) if isinstance(d, tvm.tirx.IntImm) else str(d) for d in ty.shape]
                raise refuse(op_name, attrs, opset, f"its output would be empty (shape {shape}); "
                             "tvm_fuse builds no empty tensors")

    def _convert_operator(self, op_name, inputs, attrs, opset):
        builder = self.bb
        if self._current_node is not None:
            self.bb = _NodeBuilder(builder, provenance.tag(self._current_node))
        try:
            if op_name in _SAME_TYPED_OPS:
                _prims_as_tensors_dtype(inputs)
            converted = folded(self._current_node_proto, inputs, opset) if self._current_node_proto else None
            ours = CONVERTERS.get(op_name)
            if converted is None and ours:
                converted = ours(self.bb, inputs, attrs, opset)
            if converted is None:
                converted = super()._convert_operator(op_name, inputs, attrs, opset)
            if isinstance(self.bb, _NodeBuilder) and isinstance(converted, relax.Call):
                converted = self.bb.emit(converted)
                if isinstance(converted.ty, relax.TupleType):  # unpack here, so the items are named too
                    fields = range(len(converted.ty.fields))
                    converted = relax.Tuple([self.bb.emit(relax.TupleGetItem(converted, i)) for i in fields])
            self._refuse_empty(converted, op_name, attrs, opset)
            return converted
        except ModelLoadError:  # the node's own message: it is unsupported or invalid
            raise
        except Exception as error:
            raise CompileError(
                f"cannot import ONNX node {node_name(attrs)!r} (op {op_name}, opset {opset}): "
                f"{type(error).__name__}: {error}{self._static_shapes_hint(error)}"
            ) from error
        finally:
            self.bb = builder


def import_onnx(model: onnx.ModelProto) -> tvm.IRModule:
    """Relax module for `model`, with the weights as constants."""
    check_supported(model)
    importer = _NamingImporter(model)
    try:
        # The importer prints a failing node's inputs; the CompileError says what matters.
        with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return importer.from_onnx(model.graph, default_opset(model))
    except (CompileError, ModelLoadError):
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
