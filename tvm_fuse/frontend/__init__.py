"""ONNX in: load a model, fix its shapes, repair what TVM's importer rejects, import it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from .fixups import apply_fixups
from .importer import import_onnx, set_input_shapes
from .load import load_model


def relax_module(model, input_shapes: Mapping[str, Sequence[int]] | None = None):
    """(the ONNX model as imported, its Relax module): loaded, shapes fixed, fixed up, imported."""
    onnx_model = load_model(model)
    if input_shapes:
        onnx_model = set_input_shapes(onnx_model, dict(input_shapes))
    onnx_model = apply_fixups(onnx_model)
    return onnx_model, import_onnx(onnx_model)
