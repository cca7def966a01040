"""int8 builds above the pipeline: `tvm_fuse.quantize` runs the fp32 model on calibration
feeds and turns the values of every tensor an int8 kernel would read or write into a u8 scale
and zero point; `int8_pass` calibrates a build's `QuantConfig` where it names samples and makes
its `RealizeInt8` pass."""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path

import tvm
from tvm import relax

from .calibration_table import CalibrationTable, TensorScale
from .errors import CompileError, InputError, TvmFuseError
from .frontend import ImportedModel, relax_module
from .frontend.importer import graph_inputs
from .frontend.support import nodes_named_in
from .pipeline import compile_lowered, lowered, optimize
from .quantization.calibration_data import calibration_feeds, sample_files
from .quantization.config import QuantConfig
from .quantization.ranges import entropy_range, minmax_range, percentile_range
from .quantization.statistics import TensorStatistics
from .target import isa_features, parse_target, target_string
from .transform.expose_tensors import ExposeTensors
from .transform.realize.int8 import realize_int8


def quantize(model, calibration, target=None, *, method: str = "entropy", exclude: Iterable[str] = (),
             percentile: float = 99.99, max_samples: int | None = None,
             input_shapes: Mapping[str, Sequence[int]] | None = None) -> CalibrationTable:
    """Calibrate `model` on `calibration` for int8: the table of scales `build` takes
    (`build(..., quantize=QuantConfig(calibration=table))`, or `table.save(path)` first).

    Args:
        model: an .onnx path, its bytes or an `onnx.ModelProto`.
        calibration: samples of the inputs: one array stacked along the batch axis (one-input
            models) or a dict of them, an iterable of feeds (dicts as `run` takes), or a folder
            of `.npy` (one array of samples each) / `.npz` (one entry per input) files.
        target: the CPU the calibration model is compiled for; it runs on this machine, so
            the default is this machine's CPU. The table serves any target.
        input_shapes: as for `build`.
        method, exclude, percentile, max_samples: see `QuantConfig`.

    Raises:
        InputError for calibration data of the wrong names, shapes or dtypes, whose values
        make a tensor inf or NaN (named), or that take an If's branch the model cannot run at
        the shapes it was built for (named).
    """
    config = QuantConfig(calibration, method, exclude=tuple(exclude), percentile=percentile, max_samples=max_samples)
    return calibrate(model, config, target, input_shapes)


def calibrate(model, config: QuantConfig, target=None, input_shapes=None) -> CalibrationTable:
    tvm_target = parse_target(target)
    onnx_model, mod, *_ = relax_module(model, input_shapes)
    exposed: list[str] = []
    try:
        mod = optimize(mod, tvm_target, int8=ExposeTensors(onnx_model, config.exclude, exposed))
        mod = lowered(mod, tvm_target, onnx_model)
        executable = compile_lowered(mod, tvm_target)
    except TvmFuseError:
        raise
    except Exception as error:
        brief = target_string(tvm_target, brief=True)
        raise CompileError.of(error, "compiling the calibration model", brief,
                              nodes_named_in(str(error), onnx_model)) from error
    machine = relax.VirtualMachine(executable, tvm.cpu())
    statistics = {name: TensorStatistics() for name in exposed}
    samples = 0
    for samples, feed in enumerate(calibration_feeds(config.calibration, graph_inputs(onnx_model),
                                                     config.max_samples), 1):
        try:
            _, *values = machine["main"](*[tvm.runtime.tensor(a) for a in feed.values()])
        except AssertionError as error:  # a run-time check: an If's branch not built for these shapes
            raise InputError(f"calibration feed {samples}: {error}") from None
        for name, value in zip(exposed, values):
            try:
                statistics[name].add(value.numpy())
            except FloatingPointError as error:
                raise InputError(f"calibration feed {samples}: tensor {name!r} {error}") from None
    return CalibrationTable({name: TensorScale.from_range(*_range(stats, config)) for name, stats in statistics.items()},
                            config.method, config.exclude, samples)


def _range(stats: TensorStatistics, config: QuantConfig) -> tuple[float, float]:
    if config.method == "minmax":
        return minmax_range(stats)
    if config.method == "percentile":
        return percentile_range(stats, config.percentile)
    return entropy_range(stats)


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
