"""The fusion report: which kernels the fused graph runs, which ONNX nodes each covers, and
why every other node was left unfused or needs no kernel at all.

It reads the graph `pipeline.optimize` returns: our kernels carry their pattern as an
attribute and their ONNX nodes in the span of each call (`LowerComposites`); every other
binding still carries its node in its name (`provenance`).
"""

from __future__ import annotations

from collections import Counter

import onnx
import tvm
from tvm import relax
from tvm.ir.expr import GenericConst

from . import provenance
from .compute import epilogue
from .frontend.branches import all_nodes
from .frontend.fixups import user_node_name
from .frontend.importer import graph_functions
from .fusion_report import FusionReport
from .ir_names import ANCHOR_ATTR, KERNEL_ATTR, KNOBS_ATTR, PATTERN_ATTR, UNBUILT_ATTR, UNBUILT_NODES_ATTR
from .patterns.switches import env_variable
from .patterns.table import ANCHORS, operands_fit
from .transform.blocked_layout import plain_reason
from .transform.realize.bf16 import BF16_ATTR
from .transform.realize.int8 import INT8_ATTR
from .transform.relax_helpers import use_counts

_ANCHOR_OPS = {"relax.nn.conv1d": "conv", "relax.nn.conv2d": "conv", "relax.matmul": "fc"}


def node_label(node: onnx.NodeProto, index: int) -> str:
    """The user's name of a node (every node is named on load; fix-ups' parts map back)."""
    return user_node_name(node) or f"{node.op_type}#{index}"


def fusion_report(mod: tvm.IRModule, model: onnx.ModelProto, block: int, disabled=()) -> FusionReport:
    """The report for `mod` (from `pipeline.optimize` with blocks of `block` channels) of `model`
    (as imported). A fix-up's replacement nodes are reported once, under the name of the node
    they replace. A node split by a disabled family (a Conv whose bias add is left out) is in a
    kernel and in `unfused`."""
    nodes = all_nodes(model)
    labels = [node_label(node, i) for i, node in enumerate(nodes)]
    graphs = graph_functions(mod)
    bindings = [b for func in graphs for block in func.body.blocks for b in block.bindings]
    uses = sum((use_counts(func) for func in graphs), Counter())
    producers = {b.var: b.value for b in bindings}
    report = FusionReport(disabled_families=sorted(disabled))
    covered: set[str] = set()
    moved: set[str] = set()  # nodes whose moves a layout transform makes (`FoldLayoutChains`)
    for binding in bindings:
        kernel = _kernel(mod, binding.value)
        if kernel is not None:
            name, func = kernel
            kernel_labels = list(dict.fromkeys(labels[i] for i in provenance.span_nodes(binding.value)))
            covered.update(kernel_labels)
            report.kernels.append({"name": name, "pattern": str(func.attrs[PATTERN_ATTR]), "onnx_nodes": kernel_labels,
                                   "int8": bool(func.attrs.get(INT8_ATTR, False)),
                                   "precision": _precision(func),
                                   **_conv_layout(binding.value, str(func.attrs[PATTERN_ATTR]), block)})
        elif _is_layout_transform(binding.value):
            report.layout_transforms += 1
            moved.update(labels[i] for i in provenance.span_nodes(binding.value))
    calls: dict[str, list[relax.Call]] = {}  # unfused node -> the calls it runs, in order
    joined: dict[str, str] = {}  # a node computed in another unfused node's kernel -> that node
    for binding in bindings:
        index = provenance.node_index(binding.var)
        if index is not None and _runs(binding.value) and _kernel(mod, binding.value) is None:
            calls.setdefault(labels[index], []).append(binding.value)
            joined.update({labels[i]: labels[index] for i in provenance.span_nodes(binding.value) if i != index})
    op_types = {label: node.op_type for label, node in zip(reversed(labels), reversed(nodes))}  # first wins
    for label, node_calls in calls.items():
        outside = [_op_name(mod, c) for c in node_calls if _op_name(mod, c) not in epilogue.ELEMENTWISE]
        if outside and outside[0] not in _ANCHOR_OPS:
            short = outside[0].removeprefix("relax.")
            reason = f"no pattern of the table contains {op_types[label]} ({short}); it runs as its own kernel"
        else:
            reason = _reason(mod, node_calls[0], nodes, producers, uses, disabled)
        report.unfused.append({"onnx_node": label, "op_type": op_types[label], "reason": reason})
    unbuilt = {labels[i]: str(func.attrs[UNBUILT_ATTR]) for func in graphs if UNBUILT_NODES_ATTR in (func.attrs or {})
               for i in range(*(int(n) for n in func.attrs[UNBUILT_NODES_ATTR]))}
    for label in dict.fromkeys(labels):
        if label in covered or label in calls:
            continue
        if label in joined:
            reason = f"computed in the kernel of node {joined[label]} ({op_types[joined[label]]})"
        elif label in unbuilt:
            reason = unbuilt[label]
        elif op_types[label] == "If":
            reason = "control flow: the branch its condition picks runs, each compiled as a graph of its own"
        elif label in moved:
            report.folded.append({"onnx_node": label, "op_type": op_types[label],
                                  "reason": "no kernel of its own: moved by a layout transform at a blocked chain's border"})
            continue
        else:
            report.folded.append({"onnx_node": label, "op_type": op_types[label],
                                  "reason": "no run-time work: computed at build time, or removed as a no-op"})
            continue
        report.unfused.append({"onnx_node": label, "op_type": op_types[label], "reason": reason})
    return report


def count_tuned_kernels(mod: tvm.IRModule) -> tuple[int, int]:
    """(tuned, default): our distinct kernels in `mod` by where their knobs came from."""
    sources = Counter(str(func.attrs[KNOBS_ATTR]) for _, func in mod.functions_items()
                      if isinstance(func, tvm.tirx.PrimFunc) and func.attrs and KNOBS_ATTR in func.attrs)
    return sources["tuned"], sources["default"]


def count_kernel_calls(mod: tvm.IRModule) -> int:
    """Kernel calls in the graph of a legalized module (`pipeline.lowered`), all If branches counted."""
    calls = ("relax.call_tir", "relax.call_tir_inplace", "relax.call_dps_packed")
    return sum(1 for func in graph_functions(mod) for block in func.body.blocks for b in block.bindings
               if isinstance(b.value, relax.Call) and isinstance(b.value.op, tvm.ir.Op) and b.value.op.name in calls)


def _op_name(mod: tvm.IRModule, call: relax.Call) -> str:
    """The Relax op a call runs; our own unfused kernels (`LowerMatmuls`) by what they compute."""
    if call.op.same_as(tvm.ir.Op.get("relax.call_tir")):
        kernel = mod[call.args[0]].attrs.get(KERNEL_ATTR) if mod[call.args[0]].attrs else None
        if kernel is not None:
            return f"relax.{kernel}"
    if isinstance(call.op, relax.ExternFunc):  # a VM builtin, e.g. tensor_to_shape
        return str(call.op.global_symbol)
    return call.op.name


def _precision(kernel: tvm.tirx.PrimFunc) -> str:
    """What a fused kernel multiplies in: int8, bf16 or fp32."""
    for precision, attr in (("int8", INT8_ATTR), ("bf16", BF16_ATTR)):
        if kernel.attrs.get(attr, False):
            return precision
    return "fp32"


def _conv_layout(call: relax.Call, pattern: str, block: int) -> dict:
    """{"layout"} of a 2-D conv kernel's input, and {"plain_reason"} if that is NCHW; {} otherwise."""
    data, weight, *_ = call.args[1].fields
    data_shape, weight_shape = data.ty.shape, weight.ty.shape
    if "conv2d" not in pattern.split("+")[0] or data_shape is None:
        return {}
    if len(data_shape) == 5:
        return {"layout": f"NCHW{int(data_shape[4])}c"}
    if len(data_shape) != 4 or weight_shape is None or len(weight_shape) != 4:
        return {}
    channels, outputs, per_group = (int(d) if isinstance(d, tvm.tirx.IntImm) else None
                                    for d in (data_shape[1], weight_shape[0], weight_shape[1]))
    if None in (channels, outputs, per_group):
        reason = "its channel counts are not known at build time"
    else:
        # The layout was chosen for the float32 conv, before int8 or bf16 realized it.
        reason = plain_reason(channels, outputs, channels // per_group, "float32", block)
    return {"layout": "NCHW", "plain_reason": reason or "the conversion to blocked layouts failed for the "
                                                      "whole model (a warning named the cause)"}


def _is_layout_transform(value) -> bool:
    return (isinstance(value, relax.Call) and isinstance(value.op, tvm.ir.Op)
            and value.op.name == "relax.layout_transform")


def _runs(value) -> bool:
    """Whether a binding does a node's work at run time (tuple plumbing and aliases do not;
    layout transforms are the compiler's, counted apart)."""
    return isinstance(value, relax.Call) and not _is_layout_transform(value)


def _kernel(mod: tvm.IRModule, value):
    """(name, PrimFunc) if `value` calls one of our fused kernels."""
    if not (isinstance(value, relax.Call) and value.op.same_as(tvm.ir.Op.get("relax.call_tir"))):
        return None
    gvar = value.args[0]
    func = mod[gvar]
    if isinstance(func, tvm.tirx.PrimFunc) and PATTERN_ATTR in (func.attrs or {}):
        return gvar.name_hint, func
    return None



def _reason(mod, value: relax.Call, nodes, producers, uses, disabled) -> str:
    op = _op_name(mod, value)
    if op in _ANCHOR_OPS:
        if value.op.same_as(tvm.ir.Op.get("relax.call_tir")) or not isinstance(value.args[1], GenericConst):
            return "weights are not constant (computed at run time), so they cannot be packed at build time"
        if all(anchor.kind(value) is None for anchor in ANCHORS if anchor.family == _ANCHOR_OPS[op]):
            return "not a float32 NCHW / OIHW (or NCW / OIW) operation, which the kernels support"
        return "the conv / fc kernel could not be formed"
    short = op.removeprefix("relax.")
    for arg in value.args:
        producer = producers.get(arg)
        kernel = _kernel(mod, producer) if producer is not None else None
        if kernel is None:
            continue
        name, func = kernel
        last = max(provenance.span_nodes(producer))
        producer_op = nodes[last].op_type
        if uses[arg] > 1:
            return f"its input, the output of {producer_op} '{node_label(nodes[last], last)}', has {uses[arg]} consumers"
        family = _family(func, value)
        if family in disabled:
            return f"fusion family '{family}' is disabled (disable_fusion or {env_variable(family)})"
        if op == "relax.add" and not operands_fit(value, arg.ty.shape, {arg}):
            other = [a for a in value.args if not a.same_as(arg)]
            shapes = [list(a.ty.shape) for a in other if a.ty.shape is not None]
            return (f"the other operand {shapes} would broadcast the kernel's output {list(arg.ty.shape)} "
                    "to a larger tensor, so the add is not a sum post-op")
        return (f"the table has no post-op slot for {short} after "
                f"{func.attrs[PATTERN_ATTR]!s} (kernel '{name}')")
    upstream = _upstream_kernel(mod, value, producers)
    if upstream is not None:
        family = _family(upstream[1], value)
        if family in disabled:
            return f"fusion family '{family}' is disabled (disable_fusion or {env_variable(family)})"
    sources = []
    for arg in value.args:
        index = provenance.node_index(arg) if isinstance(arg, relax.Var) else None
        if index is not None:
            sources.append(f"{nodes[index].op_type} '{node_label(nodes[index], index)}'")
        elif isinstance(arg, relax.Var) and arg not in producers:
            sources.append(f"graph input '{arg.name}'")
    origin = f" (its input comes from {', '.join(sources)})" if sources else ""
    return f"{short} could be a post-op, but not after a conv / fc kernel{origin}"


def _upstream_kernel(mod, value: relax.Call, producers: dict, depth: int = 8):
    """The fused kernel `value` follows through a run of unfused post-ops, if any."""
    for _ in range(depth):
        inputs = [a for a in value.args if isinstance(a, relax.Var) and a in producers]
        if not inputs:
            return None
        producer = producers[inputs[0]]
        kernel = _kernel(mod, producer)
        if kernel is not None:
            return kernel
        if not (isinstance(producer, relax.Call) and isinstance(producer.op, tvm.ir.Op)
                and producer.op.name in epilogue.ELEMENTWISE):
            return None
        value = producer
    return None


def _family(func, value: relax.Call) -> str:
    """The family that would have absorbed `value` into kernel `func`."""
    steps = str(func.attrs[PATTERN_ATTR]).split("+")
    anchor = str(func.attrs[ANCHOR_ATTR])
    if value.op.name == "relax.add":
        constant = any(isinstance(a, GenericConst) for a in value.args)
        return f"{anchor}_{'bias' if constant else 'sum'}"
    if value.op.name == "relax.multiply":
        return f"{anchor}_bn"
    return f"{anchor}_{'sum' if 'sum' in steps else 'relu'}"
