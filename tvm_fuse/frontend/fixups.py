"""ONNX-level rewrites for graphs that TVM 0.27's importer rejects or imports wrongly.

Each fix-up is a function `ModelProto -> ModelProto` (the input is never changed) that leaves
the model's values unchanged and only reshapes the graph into a form the importer handles. The
table `FIXUPS` says, per entry, which importer gap it closes.
"""

from __future__ import annotations

from collections.abc import MutableMapping
from dataclasses import dataclass
from typing import Callable

import numpy as np
import onnx
from onnx import helper, numpy_helper


class ConstantValues(MutableMapping):
    """Values known at import time, by name: initializers and Constant nodes with a tensor
    value, each converted to numpy when first read (the fix-ups read a few small ones; a
    model's weights, hundreds of MB, are never converted for them), and values set since."""

    def __init__(self, graph: onnx.GraphProto):
        self._tensors: dict[str, onnx.TensorProto | None] = {t.name: t for t in graph.initializer}
        for node in graph.node:
            if node.op_type == "Constant":
                for attribute in node.attribute:
                    if attribute.name == "value":
                        self._tensors[node.output[0]] = attribute.t
        self._arrays: dict[str, np.ndarray] = {}

    def __getitem__(self, name: str) -> np.ndarray:
        if name not in self._arrays:
            self._arrays[name] = numpy_helper.to_array(self._tensors[name])
        return self._arrays[name]

    def __setitem__(self, name: str, value: np.ndarray) -> None:
        self._tensors[name], self._arrays[name] = None, value

    def __delitem__(self, name: str) -> None:
        del self._tensors[name]
        self._arrays.pop(name, None)

    def __contains__(self, name) -> bool:  # without converting the value, as Mapping's would
        return name in self._tensors

    def __iter__(self):
        return iter(self._tensors)

    def __len__(self) -> int:
        return len(self._tensors)

    def size(self, name: str) -> int:
        """Elements of the value `name`, read without converting it."""
        tensor = self._tensors[name]
        return int(np.prod(tensor.dims)) if tensor is not None else int(np.asarray(self._arrays[name]).size)


def constant_values(graph: onnx.GraphProto) -> ConstantValues:
    """Values known at import time: initializers and Constant nodes with a tensor value."""
    return ConstantValues(graph)


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


_FOLD_LIMIT = 1024  # elements of each input and output: shape and pads arithmetic, not weights
_NEVER_FOLDED = {"RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike", "Multinomial", "Bernoulli"}


def _skeleton(model: onnx.ModelProto) -> onnx.ModelProto:
    """`model` with the data of its initializers of more than `_FOLD_LIMIT` elements left out
    (their names, types and dims kept): all shape inference reads, without copying or
    serializing the weights."""
    graph = onnx.GraphProto(name=model.graph.name)
    for field in ("node", "input", "output", "value_info", "sparse_initializer"):
        getattr(graph, field).extend(getattr(model.graph, field))
    for tensor in model.graph.initializer:
        if int(np.prod(tensor.dims)) <= _FOLD_LIMIT:
            graph.initializer.append(tensor)
        else:
            graph.initializer.append(onnx.TensorProto(name=tensor.name, data_type=tensor.data_type, dims=tensor.dims))
    skeleton = onnx.ModelProto(ir_version=model.ir_version, graph=graph)
    skeleton.opset_import.extend(model.opset_import)
    skeleton.functions.extend(model.functions)
    return skeleton


def _static_shapes(model: onnx.ModelProto) -> dict[str, list[int]]:
    """Tensor name -> its shape, for the tensors whose shape ONNX's shape inference knows fully."""
    try:
        inferred = onnx.shape_inference.infer_shapes(_skeleton(model))
    except (onnx.shape_inference.InferenceError, onnx.checker.ValidationError):
        return {}
    shapes = {}
    for value in [*inferred.graph.input, *inferred.graph.value_info, *inferred.graph.output]:
        tensor = value.type.tensor_type
        if tensor.HasField("shape") and all(d.HasField("dim_value") for d in tensor.shape.dim):
            shapes[value.name] = [d.dim_value for d in tensor.shape.dim]
    return shapes


def _evaluated(node: onnx.NodeProto, inputs: list[np.ndarray | None], model: onnx.ModelProto) -> list | None:
    """`node`'s outputs on constant `inputs`, by ONNX's reference implementation; None if it fails."""
    from onnx.reference import ReferenceEvaluator

    named = [numpy_helper.from_array(value, name) for name, value in zip(node.input, inputs) if name]
    graph = helper.make_graph([node], "fold", [], [helper.make_tensor_value_info(o, 0, None) for o in node.output], named)
    try:
        return ReferenceEvaluator(helper.make_model(graph, opset_imports=model.opset_import)).run(None, {})
    except Exception:  # noqa: BLE001 -- an op the reference cannot run here stays in the graph
        return None


def fold_shape_arithmetic(model: onnx.ModelProto) -> onnx.ModelProto:
    """Shape (and Size) of a tensor whose shape is static -> a Constant; then every node whose
    inputs are all small constants -> a Constant of its outputs, computed by ONNX's reference;
    an If whose condition is now a constant -> the branch it takes. Repeated while it folds: a
    Reshape given a constant shape gives shape inference the static shape of the tensors after
    it."""
    while True:
        folded = _inline_constant_ifs(_fold_once(model))
        if [n.op_type for n in folded.graph.node] == [n.op_type for n in model.graph.node]:
            return folded
        model = folded


def _inline_constant_ifs(model: onnx.ModelProto) -> onnx.ModelProto:
    """An If whose condition folded to a constant -> the nodes of the branch it takes, its
    outputs as Identity nodes named after the If (ONNX keeps names unique across subgraphs)."""
    constants = constant_values(model.graph)
    taken = []

    def rewrite(node):
        if node.op_type != "If" or node.input[0] not in constants:
            return [node]
        branch_name = "then_branch" if bool(constants[node.input[0]].reshape(-1)[0]) else "else_branch"
        branch = next(a.g for a in node.attribute if a.name == branch_name)
        taken.append(branch)
        return [*branch.node, *(helper.make_node("Identity", [inner.name], [outer], name=node.name)
                                for inner, outer in zip(branch.output, node.output))]

    inlined = _replace_nodes(model, rewrite)
    for branch in taken:
        inlined.graph.initializer.extend(branch.initializer)
    return inlined


def _fold_once(model: onnx.ModelProto) -> onnx.ModelProto:
    shapes = _static_shapes(model)
    constants = constant_values(model.graph)

    def folded(node, values):
        constants.update(zip(node.output, values))
        return [helper.make_node("Constant", [], [out], name=node.name, value=numpy_helper.from_array(np.asarray(v)))
                for out, v in zip(node.output, values)]

    def rewrite(node):
        if node.op_type in ("Shape", "Size") and node.input[0] in shapes:
            shape = shapes[node.input[0]]
            if node.op_type == "Size":
                return folded(node, [np.array(np.prod(shape), np.int64)])
            attrs = {a.name: a.i for a in node.attribute}
            return folded(node, [np.array(shape[attrs.get("start", 0):attrs.get("end", len(shape))], np.int64)])
        if (node.op_type in _NEVER_FOLDED or node.op_type == "Constant" or node.domain not in ("", "ai.onnx")
                or not node.input or any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)
                                         for a in node.attribute)):
            return [node]
        if any(name and (name not in constants or constants.size(name) > _FOLD_LIMIT) for name in node.input):
            return [node]
        inputs = [constants[name] if name else None for name in node.input]
        values = _evaluated(node, inputs, model)
        if values is None or any(np.asarray(v).size > _FOLD_LIMIT for v in values):
            return [node]
        return folded(node, values)

    return _replace_nodes(model, rewrite)


def explicit_same_padding(model: onnx.ModelProto) -> onnx.ModelProto:
    """Conv with `auto_pad` SAME_UPPER / SAME_LOWER over a static input -> the same Conv with
    explicit `pads` (ONNX's formula, `same_pads`)."""
    shapes = None

    def rewrite(node):
        nonlocal shapes
        attributes = {a.name: a for a in node.attribute}
        mode = attributes["auto_pad"].s.decode() if "auto_pad" in attributes else "NOTSET"
        if node.op_type != "Conv" or mode not in ("SAME_UPPER", "SAME_LOWER"):
            return [node]
        shapes = _static_shapes(model) if shapes is None else shapes
        data = shapes.get(node.input[0])
        if data is None or "kernel_shape" not in attributes:  # exporters write it; the weight's shape says it too
            return [node]
        spatial = len(data) - 2
        kernel = list(attributes["kernel_shape"].ints)
        strides = list(attributes["strides"].ints) if "strides" in attributes else [1] * spatial
        dilations = list(attributes["dilations"].ints) if "dilations" in attributes else [1] * spatial
        fixed = onnx.NodeProto()
        fixed.CopyFrom(node)
        del fixed.attribute[:]
        fixed.attribute.extend([a for a in node.attribute if a.name not in ("auto_pad", "pads")])
        fixed.attribute.append(helper.make_attribute("pads", same_pads(data[2:], kernel, strides, dilations, mode)))
        return [fixed]

    return _replace_nodes(model, rewrite)


def same_pads(sizes, kernel, strides, dilations, mode: str) -> list[int]:
    """ONNX's `pads` (all befores, then all afters) for `auto_pad` `mode` (SAME_UPPER or
    SAME_LOWER) over spatial `sizes`: the total that keeps ceil(size / stride) outputs, the odd
    one after the rest for SAME_UPPER, before it for SAME_LOWER."""
    before, after = [], []
    for size, k, s, d in zip(sizes, kernel, strides, dilations):
        total = max((-(-size // s) - 1) * s + (k - 1) * d + 1 - size, 0)
        small, large = total // 2, total - total // 2
        before.append(small if mode == "SAME_UPPER" else large)
        after.append(large if mode == "SAME_UPPER" else small)
    return before + after


def drop_empty_concat_inputs(model: onnx.ModelProto) -> onnx.ModelProto:
    """A Concat input whose static shape is empty (a Slice to the end of a tensor already
    consumed, torch's `x[:, k:]`) -> left out of the Concat, as it adds nothing; the nodes that
    computed it and now feed nothing -> removed."""
    sliced = {out for node in model.graph.node if node.op_type == "Slice" for out in node.output}
    if not any(name in sliced for node in model.graph.node if node.op_type == "Concat" for name in node.input):
        return model  # only a slice is empty where the inputs are not: no shape inference then
    shapes = None

    def rewrite(node):
        nonlocal shapes
        if node.op_type != "Concat":
            return [node]
        shapes = _static_shapes(model) if shapes is None else shapes
        kept = [name for name in node.input if not (name in shapes and 0 in shapes[name])]
        if len(kept) in (0, len(node.input)):
            return [node]
        fixed = onnx.NodeProto()
        fixed.CopyFrom(node)
        del fixed.input[:]
        fixed.input.extend(kept)
        return [fixed]

    fixed = _replace_nodes(model, rewrite)
    return model if shapes is None or fixed.graph.node == model.graph.node else _without_dead_nodes(fixed)


def _read_names(graph: onnx.GraphProto) -> set[str]:
    """Every name a node of `graph` or of a graph inside it reads."""
    names = set()
    for node in graph.node:
        names.update(node.input)
        for attribute in node.attribute:
            for inner in [attribute.g, *attribute.graphs] if attribute.type in (
                    onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) else []:
                names |= _read_names(inner)
    return names


def _without_dead_nodes(model: onnx.ModelProto) -> onnx.ModelProto:
    """`model` less the nodes none of whose outputs is read or is a graph output."""
    while True:
        live = _read_names(model.graph) | {output.name for output in model.graph.output}
        pruned = _replace_nodes(model, lambda node: [node] if any(o in live for o in node.output) else [])
        if len(pruned.graph.node) == len(model.graph.node):
            return model
        model = pruned


@dataclass(frozen=True)
class Fixup:
    name: str
    apply: Callable[[onnx.ModelProto], onnx.ModelProto]
    why: str


FIXUPS = (
    Fixup(
        "fold_shape_arithmetic",
        fold_shape_arithmetic,
        "Exporters compute Reshape shapes and Pad widths at run time from Shape (paddle2onnx: "
        "Shape -> Cast -> Slice -> Cast -> Concat -> Reshape). The importer folds such chains "
        "only while they stay shape expressions, which a Cast ends ('Reshape requires the input "
        "new shape to be Shape', 'Dynamic pads are not supported'). Where the shapes are static "
        "(input_shapes), the chain is a constant; so may an If's condition be (silero-vad), "
        "whose branch is then inlined.",
    ),
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
    Fixup(
        "drop_empty_concat_inputs",
        drop_empty_concat_inputs,
        "tvm_fuse builds no empty tensors (TVM's kernels for them fail to compile), but torch "
        "exports `torch.cat([x[:, :k], x[:, k:]])`-style code whose second part is empty for the "
        "shapes built (RivaGAN's encoder). An empty input adds nothing to a Concat.",
    ),
    Fixup(
        "explicit_same_padding",
        explicit_same_padding,
        "The importer pads a Conv of auto_pad SAME_UPPER / SAME_LOWER with a kernel of its own "
        "(even where the padding is 0), which the blocked layout cannot follow: EfficientNet "
        "from transformers (268 such convs) left the blocked layout and came back around every "
        "one. Explicit pads are the conv's own.",
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
