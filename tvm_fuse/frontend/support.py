"""Which ONNX ops tvm_fuse can compile, checked for the whole model before anything is built."""

from __future__ import annotations

import onnx
import tvm
from tvm import relax
from tvm.relax.frontend.onnx.onnx_frontend import _get_convert_map

from .. import provenance
from ..errors import UnsupportedNode, UnsupportedOpsError
from .branches import all_nodes
from .converters import CONVERTERS, MICROSOFT_OPS


def nodes_named_in(text: str, model) -> list[str]:
    """The ONNX nodes (`model`'s node names, first seen first) whose bindings `text` mentions,
    e.g. an error that prints the Relax expression it failed on."""
    nodes = all_nodes(model)
    return [f"{nodes[i].name} ({nodes[i].op_type})" for i in provenance.tagged_nodes(text) if i < len(nodes)]


_DEFAULT_DOMAINS = ("", "ai.onnx")
# Handled by the importer itself, or by our converters rather than TVM's.
_BUILTIN_OPS = frozenset({"Constant", "If", *CONVERTERS})
# Ops TVM converts only when some inputs are known at build time: op -> those inputs' positions.
_BUILD_TIME_INPUTS = {
    "SplitToSequence": (1,),  # split sizes
    "SequenceAt": (1,),  # positions
    "SequenceErase": (1,),
    "SequenceInsert": (2,),
    "LSTM": (4,),  # sequence_lens
    "DynamicQuantizeLSTM": (4,),
    "GRU": (4,),
    "STFT": (1, 2, 3),  # frame step, window, frame length
}


def default_opset(model: onnx.ModelProto) -> int:
    """The model's ai.onnx opset version."""
    for entry in model.opset_import:
        if entry.domain in _DEFAULT_DOMAINS:
            return entry.version
    return 1


def _nodes(graph: onnx.GraphProto):
    """Every node of `graph`, including those inside If/Loop bodies."""
    for node in graph.node:
        yield node
        for attribute in node.attribute:
            if attribute.type == onnx.AttributeProto.GRAPH:
                yield from _nodes(attribute.g)
            for subgraph in attribute.graphs:
                yield from _nodes(subgraph)


def _unknown_at_build_time(node: onnx.NodeProto, constants: set[str]) -> list[str]:
    """The inputs of `node` that its converter needs known at build time but that are not."""
    positions = _BUILD_TIME_INPUTS.get(node.op_type, ())
    return [node.input[i] for i in positions if i < len(node.input) and node.input[i] and node.input[i] not in constants]


def _opsets(model: onnx.ModelProto) -> dict[str, int]:
    return {entry.domain or "ai.onnx": entry.version for entry in model.opset_import}


def _unknown_op(node: onnx.NodeProto, convert_map: dict) -> bool:
    if node.domain == "com.microsoft":
        return node.op_type not in MICROSOFT_OPS
    return node.domain not in _DEFAULT_DOMAINS or (node.op_type not in convert_map and node.op_type not in _BUILTIN_OPS)


def unsupported_nodes(model: onnx.ModelProto) -> list[UnsupportedNode]:
    """Every node whose op no converter handles, or handles only for inputs known at build
    time that this node computes at run time, in graph order."""
    convert_map = _get_convert_map()
    opsets = _opsets(model)
    constants = {t.name for t in model.graph.initializer}
    constants |= {out for node in model.graph.node if node.op_type == "Constant" for out in node.output}
    unsupported = []
    for index, node in enumerate(_nodes(model.graph)):
        if _unknown_op(node, convert_map):
            reason = ""
        elif unknown := _unknown_at_build_time(node, constants):
            reason = f"needs {', '.join(unknown)} known at build time"
        else:
            continue
        unsupported.append(UnsupportedNode(node.op_type, node.name or f"#{index}", node.domain,
                                           opsets.get(node.domain or "ai.onnx", 0), reason))
    return unsupported


def check_supported(model: onnx.ModelProto) -> None:
    """Raise UnsupportedOpsError listing every unsupported node at once."""
    nodes = unsupported_nodes(model)
    if nodes:
        raise UnsupportedOpsError(nodes)


def check_lowered(model: onnx.ModelProto, graph: list[relax.Function]) -> None:
    """Raise UnsupportedOpsError for every node of `model` whose Relax op is left in `graph` (the
    graph functions of a legalized module). TVM legalizes an op only where the shapes of its
    arguments and result are known at build time; one it cannot (an Add of a symbolic [n] and a
    [1, 2]: [1, 2] or an error) the VM cannot run, and the node is refused, named."""
    _refuse_ops(model, [b for b in _bindings(graph) if _legalizable(b.value)])


def check_unlowered(model: onnx.ModelProto, graph: list[relax.Function]) -> None:
    """For `graph` (the graph functions of a module whose lowering failed), raise
    UnsupportedOpsError for every node of `model` whose op TVM does not legalize, tried one op at
    a time: `check_lowered`'s ops, which a later pass of TVM's may fail on before it can run (a
    Mul of a symbolic [n, c, 3] and a [2, 1], where the model's weights fix c), and ops whose
    legalization fails (a PRelu's slope over a symbolic channel axis)."""
    _refuse_ops(model, [b for b in _bindings(graph) if _legalizable(b.value) and not _legalizes(b.value)])


def _legalizes(call: relax.Call) -> bool:
    """Whether TVM legalizes `call` in a function of its own, its arguments but constants and
    shapes parameters of their types."""
    params = [relax.Var(f"arg{i}", arg.ty) for i, arg in enumerate(call.args)]
    args = [arg if isinstance(arg, (tvm.ir.expr.Constant, relax.ShapeExpr)) else param
            for arg, param in zip(call.args, params)]
    builder = relax.BlockBuilder()
    with builder.function("alone", [p for p, arg in zip(params, args) if p.same_as(arg)]):
        builder.emit_func_output(builder.emit(relax.Call(call.op, args, call.attrs, call.ty_args)))
    try:
        legal = relax.transform.LegalizeOps()(builder.get())
    except Exception:
        return False
    return not any(_legalizable(b.value) for b in _bindings([legal["alone"]]))


def _bindings(graph: list[relax.Function]) -> list:
    return [b for func in graph for block in func.body.blocks for b in block.bindings]


def _legalizable(value) -> bool:
    return isinstance(value, relax.Call) and isinstance(value.op, tvm.ir.Op) \
        and value.op.get_attr("FLegalize") is not None


def _refuse_ops(model: onnx.ModelProto, bindings: list) -> None:
    """Raise UnsupportedOpsError for the ONNX nodes of `bindings`, ops whose shapes are not known
    at build time."""
    opsets, nodes = _opsets(model), all_nodes(model)
    refused: dict[str, UnsupportedNode] = {}
    for binding in bindings:
        call = binding.value
        index = provenance.node_index(binding.var)
        indices = [index] if index is not None else provenance.span_nodes(call)
        shapes = " and ".join(str(arg.ty) for arg in call.args)
        reason = f"{call.op.name} of {shapes} gives a shape unknown at build time ({call.ty})"
        # (op type, node name, domain) of its ONNX nodes; a binding that records none, by its op and variable
        named = [(n.op_type, n.name, n.domain) for n in (nodes[i] for i in indices if i < len(nodes))]
        for op_type, name, domain in named or [(call.op.name, binding.var.name, "")]:
            refused.setdefault(name, UnsupportedNode(op_type, name, domain, opsets.get(domain or "ai.onnx", 0), reason))
    if refused:
        raise UnsupportedOpsError(list(refused.values()))
