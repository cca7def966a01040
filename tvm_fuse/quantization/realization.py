"""Which int8 realization a build (or a tuning job) runs: from a `QuantConfig`, or from a
pre-quantized model's own scales."""

from __future__ import annotations

import warnings
from dataclasses import replace
from pathlib import Path

import tvm

from ..calibration_table import CalibrationTable
from ..errors import InputError
from ..frontend import ImportedModel
from ..target import isa_features, target_string
from ..transform.realize.int8 import realize_int8
from .calibrate import calibrate
from .calibration_data import sample_files
from .config import QuantConfig


def int8_pass(model, imported: ImportedModel, config: QuantConfig | None, target: tvm.target.Target,
              input_shapes) -> tvm.transform.Pass | None:
    """The `RealizeInt8` pass for `model` (`imported` from it): of `config`, else of a QDQ
    model's own scales; None for an fp32 build, or when the target cannot run int8 kernels.
    A `config` whose calibration names samples is calibrated here (`calibrated`)."""
    return realize_int8(imported, calibrated(model, imported, config, target, input_shapes), target)


def checked_config(config):
    """`config`, if it is a QuantConfig or None."""
    if config is not None and not isinstance(config, QuantConfig):
        raise InputError(f"quantize takes a tvm_fuse.QuantConfig, not {type(config).__name__}")
    return config


def calibrated(model, imported: ImportedModel, config: QuantConfig | None, target: tvm.target.Target,
               input_shapes) -> QuantConfig | None:
    """`config` (or a QDQ model's own scales) with its calibration a `CalibrationTable`, or
    None for dynamic activations: calibrated once here (running the fp32 model), so that
    builds of one model for several targets share it. None for an fp32 build, or (with a
    warning) when the target cannot run int8 kernels."""
    if config is None:
        if imported.qdq_scales is None:
            return None
        config = QuantConfig(calibration=imported.qdq_scales)  # a pre-quantized model runs as it is
    config = checked_config(config)
    table = config.calibration
    if isinstance(table, (str, Path)) and Path(table).suffix != ".json":
        sample_files(Path(table))  # a bad path is an error on any target
    features = isa_features(target)
    if "avx2" not in features and "avx512bw" not in features:
        warnings.warn(f"int8 kernels need AVX2 or AVX-512 (BW); {target_string(target)} builds in fp32")
        return None
    if isinstance(table, (str, Path)) and Path(table).suffix == ".json":
        table = CalibrationTable.load(table)
    if config.activations == "static" and not isinstance(table, CalibrationTable):
        table = calibrate(model, config, None, input_shapes)  # runs the fp32 model here
    return replace(config, calibration=table)
