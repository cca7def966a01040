"""ONNX in: load a model, fix its shapes, read its QDQ pairs, widen float16 to float32, repair
what TVM's importer rejects, import it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import NamedTuple

import onnx
import tvm

from ..calibration_table import CalibrationTable
from ..tensor_info import TensorInfo
from .fixups import apply_fixups
from .half_as_float import compute_half_in_float
from .importer import check_input_sizes, graph_inputs, import_onnx, set_input_shapes
from .load import load_model
from .qdq import read_qdq
from .slicing import assumed_limits


class ImportedModel(NamedTuple):
    onnx: onnx.ModelProto  # as imported: shapes fixed, float graph, fixed up
    mod: tvm.IRModule
    qdq_scales: CalibrationTable | None  # a pre-quantized (QDQ) model's own activation scales
    inputs: list[TensorInfo]  # what a run feeds, with the largest sizes the import assumed of symbolic dims


def relax_module(model, input_shapes: Mapping[str, Sequence[int]] | None = None) -> ImportedModel:
    """The model loaded, shapes fixed and checked, QDQ pairs read (`qdq`), float16
    computed in float32 (`half_as_float`), fixed up, imported."""
    onnx_model = load_model(model)
    if input_shapes:
        onnx_model = set_input_shapes(onnx_model, dict(input_shapes))
    check_input_sizes(onnx_model)
    onnx_model, qdq_scales = read_qdq(onnx_model)
    onnx_model = apply_fixups(compute_half_in_float(onnx_model))
    with assumed_limits() as limits:
        mod = import_onnx(onnx_model)
    return ImportedModel(onnx_model, mod, qdq_scales, graph_inputs(onnx_model, limits))
