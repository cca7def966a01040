"""Reading ONNX node attributes as TVM's importer hands them to a converter, and refusing the
node they describe."""

from __future__ import annotations

from ..errors import UnsupportedNode, UnsupportedOpsError


def text(value) -> str:
    """A string attribute, which the importer passes as bytes."""
    return value.decode() if isinstance(value, bytes) else str(value)


def node_name(attrs: dict) -> str:
    """The name of the node being converted, from the attributes TVM's importer passes."""
    return attrs.get("tvm_custom", {}).get("name", "?")


def refuse(op: str, attrs: dict, opset: int, reason: str) -> UnsupportedOpsError:
    """The error refusing the node being converted, in this form, for `reason`."""
    return UnsupportedOpsError([UnsupportedNode(op, node_name(attrs), "", opset, reason)])
