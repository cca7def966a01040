"""Reading ONNX node attributes as TVM's importer hands them to a converter."""

from __future__ import annotations


def text(value) -> str:
    """A string attribute, which the importer passes as bytes."""
    return value.decode() if isinstance(value, bytes) else str(value)


def node_name(attrs: dict) -> str:
    """The name of the node being converted, from the attributes TVM's importer passes."""
    return attrs.get("tvm_custom", {}).get("name", "?")
