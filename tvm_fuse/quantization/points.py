"""Where a fused graph can run in int8: its conv kernels whose data, residual and output can be
named, and the names. Scales are kept by ONNX tensor name, so a calibration table reads like
ONNX Runtime's, survives a rebuild, and `exclude` can speak of node names and op types.

A Relax variable's ONNX tensor is the first output of the last ONNX node it computes (a fused
kernel computes its chain's nodes; the last one in the graph's order is the chain's end), or,
taken from the tuple of a node of several outputs (Split), the output it takes. Ops
the compiler added, such as layout transforms and channel cuts, carry no node: they name the
tensor they read, since they keep its values.
"""

from __future__ import annotations

import math
import re
from collections.abc import Collection
from dataclasses import dataclass

import onnx
import tvm
from tvm import relax
from tvm.ir.expr import GenericConst

from .. import provenance
from ..compute.conv_nchwc_int8 import INT8_OUT_BLOCKS
from ..ir_names import ANCHOR_ATTR
from ..patterns.table import composite_nodes, composite_of

_BLOCKED = re.compile(r"NCHW(\d+)c")
_VALUE_PRESERVING = {"relax.layout_transform", "relax.strided_slice"}
MAX_WEIGHT_BOUND_ROWS = 16


@dataclass(frozen=True)
class QuantizableConv:
    """A fused conv kernel that may run in int8, as bound in `main`."""

    var: relax.Var
    data: str  # ONNX tensor names
    residual: str | None
    output: str


def tensor_names(mod: tvm.IRModule, model: onnx.ModelProto) -> dict[relax.Var, str]:
    """Every nameable variable of `main` -> its ONNX tensor. A name several variables compute
    (a node lowered to several bindings) goes to the one of them that none of the others reads
    (the end of a chain: a Clip's maximum then minimum), or to none; copies that keep the values
    share their source's."""
    main = mod["main"]
    nodes = model.graph.node
    names: dict[relax.Var, str] = {p: p.name for p in main.params}
    computed: dict[str, int] = {}  # name -> how many variables compute it
    values: dict[relax.Var, relax.Call] = {}
    several: dict[relax.Var, onnx.NodeProto] = {}  # a tuple of a node's outputs (Split's) -> the node
    for block in main.body.blocks:
        for binding in block.bindings:
            value = binding.value
            if isinstance(value, relax.TupleGetItem) and value.tuple_value in several:
                outputs = several[value.tuple_value].output
                if value.index < len(outputs):
                    names[binding.var] = outputs[value.index]
                    computed[outputs[value.index]] = computed.get(outputs[value.index], 0) + 1
                continue
            if not isinstance(value, relax.Call):
                continue
            indices = _nodes(mod, binding.var, value)
            if indices and isinstance(binding.var.ty, relax.TupleType):
                several[binding.var] = nodes[max(indices)]
            elif indices:
                names[binding.var] = nodes[max(indices)].output[0]
                computed[names[binding.var]] = computed.get(names[binding.var], 0) + 1
                values[binding.var] = value
            elif _op_name(value) in _VALUE_PRESERVING and value.args[0] in names:
                names[binding.var] = names[value.args[0]]
    by_name: dict[str, list[relax.Var]] = {}
    for var in values:
        by_name.setdefault(names[var], []).append(var)
    ends = {name: [v for v in group if not any(v in values[other].args for other in group)]
            for name, group in by_name.items() if len(group) > 1}
    return {var: name for var, name in names.items()
            if computed.get(name, 0) <= 1 or ends.get(name) == [var]}


def quantizable_convs(mod: tvm.IRModule, model: onnx.ModelProto, names: dict[relax.Var, str],
                      exclude: Collection[str] = ()) -> list[QuantizableConv]:
    """The conv kernels of `main` (composites of the fusion table) an int8 kernel can compute:
    a dense (ungrouped) conv with constant weights, output blocks of 16 or 8, and no node in
    `exclude` by name or op type. (Input blocks that are not a multiple of 4, as the image's 3
    channels, are padded when quantized.) `names`: `tensor_names(mod, model)`."""
    found = []
    for binding, func in _composites(mod, model, "conv", exclude):
        conv = func.body.blocks[0].bindings[0].value
        args = dict(zip(func.params, binding.value.args))
        if not (_int8_conv(conv) and isinstance(args.get(conv.args[1]), GenericConst)):
            continue
        data = args[conv.args[0]]
        others = [a for p, a in args.items() if not p.same_as(conv.args[0]) and not isinstance(a, GenericConst)]
        if len(others) > 1 or data not in names or binding.var not in names or (others and others[0] not in names):
            continue
        found.append(QuantizableConv(binding.var, names[data], names[others[0]] if others else None,
                                     names[binding.var]))
    return found


def weight_bound_denses(mod: tvm.IRModule, model: onnx.ModelProto, exclude: Collection[str] = (),
                        max_rows: int = MAX_WEIGHT_BOUND_ROWS) -> list[relax.Var]:
    """The dense kernels of `main` (composites of the fusion table) with constant [K, N]
    weights and at most `max_rows` static rows, none of their nodes in `exclude`: kernels
    whose time goes to reading their weights, which s8 weights cut fourfold. (With more rows
    each weight serves more FMAs, and converting it would cost more than loading it.)"""
    return [binding.var for binding, _, _, rows in _constant_weight_denses(mod, model, exclude)
            if rows is not None and rows <= max_rows]


def row_quantized_denses(mod: tvm.IRModule, model: onnx.ModelProto, exclude: Collection[str] = (),
                         min_rows: int = 1) -> list[relax.Var]:
    """The dense kernels of `main` with constant [K, N] weights, N a multiple of 8, and at least
    `min_rows` rows (or a symbolic count), none of their nodes in `exclude`: those an int8
    kernel computes on their input rows quantized at run time (`compute.dense_int8`)."""
    return [binding.var for binding, dense, weight, rows in _constant_weight_denses(mod, model, exclude)
            if int(weight.ty.shape[1]) % min(INT8_OUT_BLOCKS) == 0 and dense.args[0].ty.dtype == "float32"
            and (rows is None or rows >= min_rows)]


def _constant_weight_denses(mod: tvm.IRModule, model: onnx.ModelProto, exclude: Collection[str]):
    """(binding, anchor matmul, weight, rows: None if symbolic) of each dense kernel of `main`
    with a constant [K, N] weight, none of whose nodes `exclude` names."""
    for binding, func in _composites(mod, model, "fc", exclude):
        dense = func.body.blocks[0].bindings[0].value
        weight = dict(zip(func.params, binding.value.args)).get(dense.args[1])
        if dense.op.name != "relax.matmul" or not isinstance(weight, GenericConst) or weight.ty.ndim != 2:
            continue
        dims = [getattr(d, "value", None) for d in list(dense.args[0].ty.shape)[:-1]]
        yield binding, dense, weight, math.prod(dims) if all(isinstance(d, int) for d in dims) else None


def dense_input(mod: tvm.IRModule, value: relax.Call) -> relax.Expr:
    """The data a dense kernel's call (a composite of the fusion table) multiplies."""
    func = composite_of(mod, value)
    anchor = func.body.blocks[0].bindings[0].value
    return dict(zip(func.params, value.args))[anchor.args[0]]


def _composites(mod: tvm.IRModule, model: onnx.ModelProto, family: str, exclude: Collection[str]):
    """(binding, composite function) of each kernel of `main` whose anchor is of `family`
    (conv, fc) and none of whose ONNX nodes `exclude` names, by name or op type."""
    nodes = model.graph.node
    for block in mod["main"].body.blocks:
        for binding in block.bindings:
            func = composite_of(mod, binding.value)
            if func is None or str(func.attrs[ANCHOR_ATTR]) != family:
                continue
            if not any(nodes[i].name in exclude or nodes[i].op_type in exclude for i in composite_nodes(func)):
                yield binding, func


def _int8_conv(conv: relax.Call) -> bool:
    attrs = conv.attrs
    data_block = _BLOCKED.fullmatch(str(attrs.data_layout))
    out_block = _BLOCKED.fullmatch(str(attrs.out_layout))
    return (conv.op.name == "relax.nn.conv2d" and int(attrs.groups) == 1 and data_block is not None
            and out_block is not None and int(out_block.group(1)) in INT8_OUT_BLOCKS and conv.args[0].ty.dtype == "float32")


def _nodes(mod: tvm.IRModule, var: relax.Var, value: relax.Call) -> list[int]:
    func = composite_of(mod, value)
    if func is not None:
        return composite_nodes(func)
    index = provenance.node_index(var)
    return [index] if index is not None else provenance.span_nodes(value)


def _op_name(value: relax.Call) -> str | None:
    return value.op.name if isinstance(value.op, tvm.ir.Op) else None

