"""The exceptions tvm_fuse raises. Each message names the file, node, op or input at fault."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


class TvmFuseError(Exception):
    """Base class of every error tvm_fuse raises on purpose."""


class ModelLoadError(TvmFuseError):
    """The model cannot be read: missing file, not ONNX, truncated, or invalid."""


class TargetError(TvmFuseError, ValueError):
    """The target string, dict or object does not describe a CPU we can compile for."""


@dataclass(frozen=True)
class UnsupportedNode:
    """One ONNX node no converter handles (or not in the form it has)."""

    op_type: str
    node_name: str
    domain: str
    opset: int
    reason: str = ""  # why, where the op is supported in other forms

    def __str__(self) -> str:
        domain = self.domain or "ai.onnx"
        why = f": {self.reason}" if self.reason else ""
        return f"{self.op_type} (node {self.node_name!r}, domain {domain}, opset {self.opset}){why}"


class UnsupportedOpsError(ModelLoadError):
    """The model uses ops tvm_fuse cannot compile; `nodes` lists every one of them."""

    def __init__(self, nodes: list[UnsupportedNode]):
        self.nodes = nodes
        lines = "\n".join(f"  - {node}" for node in nodes)
        super().__init__(f"the model has {len(nodes)} node(s) with unsupported ops:\n{lines}")


class CompileError(TvmFuseError):
    """The model was read but could not be imported or compiled."""

    @classmethod
    def of(cls, error: Exception, doing: str, target: str, nodes: Sequence[str] = ()) -> "CompileError":
        """The error for `error` raised while `doing` (e.g. "compiling"): cause first, then the
        ONNX nodes it names, then the target (in its brief form)."""
        cause = str(error).strip() or type(error).__name__
        where = f" at ONNX node(s) {', '.join(nodes[:3])}" if nodes else ""
        return cls(f"{cause}{where} (while {doing} for {target})")


class InputError(TvmFuseError, ValueError):
    """A run was fed a wrong, missing or malformed input, or asked for an unknown output."""


class ExportError(TvmFuseError):
    """A compiled model could not be exported or loaded back."""
