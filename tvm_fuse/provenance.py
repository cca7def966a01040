"""Which ONNX node a Relax binding came from, carried in the binding's variable name.

The importer names every binding it emits for ONNX node number `i` as `n{i}x`. Relax passes keep
a variable's name when they move or copy a binding (a fused function's body, a rewritten value),
and the block builder only appends digits to make names unique (`n4x`, `n4x1`), so the node
survives every pass up to lowering. Passes that create bindings of their own name them with
`tag` after the node they stand for. Bindings named otherwise (`lv`, `gv`) have no node.

Fusion renames the variables it moves, so before fusing, the nodes are copied into the spans
of the calls (`span`), which fusion keeps; a fused kernel's call records all its nodes there.
"""

from __future__ import annotations

import re

import tvm

_TAG = re.compile(r"n(\d+)x\d*")


def tag(node_index: int) -> str:
    """The variable name for bindings of ONNX node `node_index` (its position in the graph,
    If branches numbered after it: `frontend.branches.numbered_graphs`)."""
    return f"n{node_index}x"


def tagged_nodes(text: str) -> list[int]:
    """The ONNX nodes whose bindings `text` mentions, first seen first."""
    return list(dict.fromkeys(int(m.group(1)) for m in re.finditer(rf"\b{_TAG.pattern}\b", text)))


def node_index(var) -> int | None:
    """The ONNX node a Relax variable was bound for, or None."""
    match = _TAG.fullmatch(var.name)
    return int(match.group(1)) if match else None


_SPAN_PREFIX = "onnx:"


def span(node_indices) -> tvm.ir.Span:
    """A span that records the ONNX nodes a call computes (it survives fusion, names do not)."""
    text = _SPAN_PREFIX + ",".join(str(i) for i in sorted(node_indices))
    return tvm.ir.Span(tvm.ir.SourceName(text), 0, 0, 0, 0)


def recorded(call, node_indices):
    """`call` with a span recording the ONNX nodes `node_indices` (None entries skipped)."""
    return tvm.ir.Call(call.op, call.args, call.attrs, call.ty_args, span(i for i in node_indices if i is not None))


def span_nodes(call) -> list[int]:
    """The ONNX nodes recorded in a call's span, or []."""
    recorded = getattr(call, "span", None)
    text = recorded.source_name.name if recorded is not None else ""
    if not text.startswith(_SPAN_PREFIX):
        return []
    return [int(i) for i in text[len(_SPAN_PREFIX):].split(",") if i]
