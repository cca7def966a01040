"""`tvm_fuse.quantize`: run the fp32 model on calibration feeds and turn the values of every
tensor an int8 kernel would read or write into a u8 scale and zero point."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import tvm
from tvm import relax

from ..calibration_table import CalibrationTable, TensorScale
from ..errors import CompileError, InputError
from ..frontend import relax_module
from ..frontend.importer import graph_inputs
from ..pipeline import compile_lowered, lowered, optimize
from ..provenance import nodes_named_in
from ..target import parse_target, target_string
from ..transform.expose_tensors import ExposeTensors
from .calibration_data import calibration_feeds
from .config import QuantConfig
from .ranges import entropy_range, minmax_range, percentile_range
from .statistics import TensorStatistics


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
        InputError for calibration data of the wrong names, shapes or dtypes, or whose values
        make a tensor inf or NaN (named).
    """
    config = QuantConfig(calibration, method, exclude=tuple(exclude), percentile=percentile, max_samples=max_samples)
    return calibrate(model, config, target, input_shapes)


def calibrate(model, config: QuantConfig, target=None, input_shapes=None) -> CalibrationTable:
    tvm_target = parse_target(target)
    onnx_model, mod, _ = relax_module(model, input_shapes)
    exposed: list[str] = []
    try:
        mod = lowered(optimize(mod, tvm_target, int8=ExposeTensors(onnx_model, config.exclude, exposed)), tvm_target)
        executable = compile_lowered(mod, tvm_target)
    except Exception as error:
        brief = target_string(tvm_target, brief=True)
        raise CompileError.of(error, "compiling the calibration model", brief,
                              nodes_named_in(str(error), onnx_model)) from error
    machine = relax.VirtualMachine(executable, tvm.cpu())
    statistics = {name: TensorStatistics() for name in exposed}
    samples = 0
    for samples, feed in enumerate(calibration_feeds(config.calibration, graph_inputs(onnx_model),
                                                     config.max_samples), 1):
        _, *values = machine["main"](*[tvm.runtime.tensor(a) for a in feed.values()])
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
