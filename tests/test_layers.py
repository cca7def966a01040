"""Layers only look down: each package or module of tvm_fuse imports only those of the layers
below it, and the base (names, targets, errors, provenance, the records a model keeps) imports
no layer. Read from each module's import statements (function-level imports included)."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest


def _root(layer: str) -> Path:
    """The folder of package `tvm_fuse.<layer>`, or the file of module `tvm_fuse.<layer>`
    (schedules/ installs into the package from the top)."""
    path = Path(importlib.import_module(f"tvm_fuse.{layer}").__file__)
    return path.parent if path.name == "__init__.py" else path


# Bottom to top; what is in no layer is the base, below them all.
LAYERS = [
    {"compute"},
    {"frontend", "patterns", "schedules"},
    {"feed"},
    {"quantization", "tuning"},
    {"transform"},
    {"pipeline"},
    {"calibrate"},
    {"tuner"},
    {"compiled_model"},
    {"api"},
    {"benchmarking"},
    {"cli"},
]
BASE = ["amx", "ir_names", "errors", "provenance", "calibration_table", "target", "tensor_info", "fusion_report",
        "weights_file"]


def _layer_of(name: str) -> int:
    """The layer of `tvm_fuse.<name>`'s top-level package or module; -1 for the base."""
    return next((i for i, layer in enumerate(LAYERS) if name in layer), -1)


def _modules(layer: str) -> list[Path]:
    root = _root(layer)
    return sorted(root.rglob("*.py")) if root.is_dir() else [root]


def _imported(path: Path, layer: str) -> set[str]:
    """The tvm_fuse modules `path` (a module of `tvm_fuse.<layer>`) imports, as dotted names
    under tvm_fuse."""
    root = _root(layer)
    package = (layer, *path.relative_to(root).parent.parts) if root.is_dir() else ()
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


@pytest.mark.parametrize("layer", sorted(set().union(*LAYERS)))
def test_a_layer_imports_nothing_above_it(layer):
    paths = _modules(layer)
    assert paths
    upward = [f"{path.name} imports tvm_fuse.{module}" for path in paths for module in _imported(path, layer)
              if _layer_of(module.split(".")[0]) >= _layer_of(layer) and module.split(".")[0] != layer]
    assert not upward, "\n".join(upward)


@pytest.mark.parametrize("module", BASE)
def test_the_base_imports_no_layer(module):
    upward = [name for name in _imported(_root(module), module) if _layer_of(name.split(".")[0]) >= 0]
    assert not upward, upward


def test_the_check_sees_relative_imports():
    # transform/lower_composites.py reads the fusion table: the check must see that import.
    assert "patterns.table" in _imported(_root("transform") / "lower_composites.py", "transform")
    assert "compute.bf16" in _imported(_root("schedules") / "amx" / "machine.py", "schedules")
