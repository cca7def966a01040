"""Layers only look down: what reads ONNX, defines computes or holds the fusion table never
imports the passes, quantization, tuning or the pipeline above it, and no pass imports the
pipeline. Read from each module's import statements (function-level imports included)."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest


def _root(layer: str) -> Path:
    """The folder of `tvm_fuse.<layer>` (schedules/ installs into the package from the top)."""
    return Path(importlib.import_module(f"tvm_fuse.{layer}").__file__).parent
# layer -> the packages (or modules) of tvm_fuse it must not import
ABOVE = {
    "frontend": {"transform", "quantization", "tuning", "pipeline", "api"},
    "compute": {"transform", "quantization", "tuning", "pipeline", "api", "frontend"},
    "patterns": {"transform", "quantization", "tuning", "pipeline", "api", "frontend"},
    "schedules": {"transform", "quantization", "tuning", "pipeline", "api", "frontend"},
    "transform": {"pipeline", "api"},
}


def _imported(path: Path, layer: str) -> set[str]:
    """The tvm_fuse modules `path` (a module of `tvm_fuse.<layer>`) imports, as dotted names
    under tvm_fuse."""
    package = (layer, *path.relative_to(_root(layer)).parent.parts)
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = list(package[:len(package) - node.level + 1])
                names = base + (node.module.split(".") if node.module else [])
                found |= {".".join(names + [alias.name]) for alias in node.names} if not node.module else {".".join(names)}
            elif node.module and node.module.startswith("tvm_fuse."):
                found.add(node.module[len("tvm_fuse."):])
        elif isinstance(node, ast.Import):
            found |= {a.name[len("tvm_fuse."):] for a in node.names if a.name.startswith("tvm_fuse.")}
    return found


@pytest.mark.parametrize("layer", ABOVE)
def test_a_layer_imports_nothing_above_it(layer):
    paths = sorted(_root(layer).rglob("*.py"))
    assert paths
    upward = [f"{layer}/{path.relative_to(_root(layer))} imports tvm_fuse.{module}"
              for path in paths for module in _imported(path, layer) if module.split(".")[0] in ABOVE[layer]]
    assert not upward, "\n".join(upward)


def test_the_check_sees_relative_imports():
    # transform/lower_composites.py reads the fusion table: the check must see that import.
    assert "patterns.table" in _imported(_root("transform") / "lower_composites.py", "transform")
    assert "compute.bf16" in _imported(_root("schedules") / "amx" / "machine.py", "schedules")
