"""The public entry points: `build` an ONNX model for a CPU, `load` an exported one."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np
import tvm

from . import build_timings, cache
from .amx import uses_tiles
from .build_timings import phase
from .calibrate import calibrated, checked_config
from .calibration_table import CalibrationTable
from .compiled_model import CompiledModel
from .errors import CompileError, TvmFuseError
from .explain import count_kernel_calls, count_tuned_kernels, fusion_report
from .frontend import relax_module
from .frontend.importer import relax_outputs
from .frontend.support import nodes_named_in
from .patterns.switches import disabled_families
from .pipeline import compile_weights_apart, lowered, optimize
from .quantization.config import QuantConfig
from .target import isa_features, parse_target, target_string, vector_lanes, without_amx
from .tensor_info import symbolic_dims_hint
from .threads import set_num_threads
from .transform.realize.bf16 import bf16_pass
from .transform.realize.int8 import realize_int8
from .tuning.database import TuningDatabase, log_paths


def build(
    model,
    target=None,
    *,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    num_threads: int | None = None,
    disable_fusion: Iterable[str] | str | None = None,
    tuning_logs: Iterable[str | Path] | str | Path | None = None,
    quantize: QuantConfig | None = None,
    precision: str = "fp32",
    cache_dir: str | Path | None = None,
) -> CompiledModel:
    """Compile an ONNX model for an x86 CPU.

    Args:
        model: a path to an .onnx file, its bytes, or an `onnx.ModelProto`.
        target: `"llvm -mcpu=skylake-avx512"` (TVM's string form, with `-num-cores=`,
            `-mattr=+avx512f,...`), the dict form, a `tvm.target.Target`, or None / `"native"`
            for this machine's CPU.
        input_shapes: static shapes for inputs with symbolic dims, e.g. `{"data": (8, 3, 224, 224)}`.
            Dims left symbolic are compiled as dynamic.
        num_threads: threads per run (default: TVM's, one per core).
        disable_fusion: fusion families to leave unfused, e.g. `["conv_sum", "fc_relu"]`, or
            `"all"`; added to those the `TVM_FUSE_DISABLE_FUSE_<FAMILY>=1` variables turn off.
            Results are the same either way; only the kernel count and speed change.
        tuning_logs: tuning logs (files, or folders of `*.jsonl`) whose best records set our
            kernels' knobs. Default: those in `TVM_FUSE_TUNING_LOGS` (separated by
            `os.pathsep`), else the logs shipped with tvm_fuse. Kernels without a record keep
            their heuristic defaults; the fusion report counts both.
        quantize: run in int8 (`QuantConfig`): calibrate on its samples first (as
            `tvm_fuse.quantize`, on this machine), or use the table it names; with
            `activations="dynamic"`, no calibration: every dense layer quantizes its input
            rows at run time (transformers), convs stay fp32. A pre-quantized
            (QDQ) model runs in int8 on the scales of its own QuantizeLinear nodes unless
            `quantize` says otherwise. Needs AVX2 or AVX-512 (with VNNI for full speed);
            on other targets the model builds in fp32, with a warning. The fusion report marks each kernel's `int8`.
            Where the target has AMX-INT8, convs and dense layers run on its tiles (`tdpbusd`).
        precision: `"fp32"` (exact, the default) or `"bf16"`: blocked conv kernels multiply in
            bf16 (weights rounded once, here; inputs as each kernel reads them) and add in
            fp32, on AVX512-BF16's `vdpbf16ps`; convs and dense layers on AMX tiles
            (`tdpbf16ps`) where the target has AMX-BF16. On targets without AVX512-BF16 the
            model builds in fp32, with a warning. The fusion report gives each kernel's
            precision. With `quantize`, the convs and dense layers int8 takes run in int8 and
            the others in bf16 (a transformer's attention products too).
        cache_dir: a folder where builds are kept (default: `TVM_FUSE_CACHE_DIR`, else no
            cache). A build whose model, target, options, tuning records and versions match
            one kept there loads it instead of compiling (calibration included); a new one is
            kept. Safe with several processes building at once; an entry that does not load
            is rebuilt, with a warning. See `tvm_fuse.cache` and `tvm-fuse cache`.

    A model with kernels on AMX tiles also has a build of itself without them (the same target
    with AMX off, `CompiledModel.fallback`), which runs, with a warning, where the operating
    system denies this process AMX. It is compiled when first needed: by `export` (which writes
    it beside the model), or by a run where AMX is denied; until then the model keeps its
    imported graph for it.

    Raises:
        ModelLoadError (UnsupportedOpsError lists every unsupported node), TargetError,
        InputError for bad `input_shapes`, CompileError.
    """
    tvm_target = parse_target(target)
    disabled = disabled_families(disable_fusion)
    logs = log_paths(tuning_logs)
    folder = cache.cache_dir(cache_dir)
    with build_timings.recording() as seconds:
        if folder is None:
            compiled = _build(model, tvm_target, input_shapes, disabled, logs, quantize, precision)
        else:
            compiled = _cached_build(folder, model, tvm_target, input_shapes, disabled, logs, quantize, precision)
    compiled._report.build_seconds = seconds
    if num_threads is not None:
        set_num_threads(num_threads)
    return compiled


def _cached_build(folder: Path, model, tvm_target, input_shapes, disabled, logs, quantize, precision) -> CompiledModel:
    """The build kept in `folder` under the key of these arguments, or a new one, kept there."""
    with phase("cache lookup"):
        model_bytes, model = cache.model_bytes(model)
        quantize = _keyable(checked_config(quantize))
        options = {"input_shapes": {name: list(shape) for name, shape in (input_shapes or {}).items()},
                   "disabled": sorted(disabled), "quantize": quantize, "precision": precision}
        target = target_string(tvm_target)
        entry_key = cache.key(model_bytes, target, options, logs)
        compiled = cache.lookup(folder, entry_key)
    if compiled is None:
        compiled = _build(model, tvm_target, input_shapes, disabled, logs, quantize, precision)
        with phase("cache store"):
            described = {"model": cache.model_name(model), "target": target, **options, "quantize": quantize is not None}
            cache.store(folder, entry_key, compiled, described)
    return compiled


def _keyable(quantize: QuantConfig | None) -> QuantConfig | None:
    """`quantize` as the cache key reads it and the build then uses: a calibration path read
    by its content, an iterable of feeds listed once (the key would spend a generator)."""
    if quantize is None:
        return None
    calibration = quantize.calibration
    if isinstance(calibration, str):
        calibration = Path(calibration)
    elif not isinstance(calibration, (Path, np.ndarray, Mapping, list, tuple, CalibrationTable, type(None))):
        calibration = list(calibration)
    return replace(quantize, calibration=calibration)


def _build(model, tvm_target, input_shapes, disabled, logs, quantize, precision) -> CompiledModel:
    with phase("read tuning logs"):
        tuning = TuningDatabase.load(logs)
    with phase("import"):
        imported = relax_module(model, input_shapes)
    with phase("calibration"):
        quantize = calibrated(model, imported, quantize, tvm_target, input_shapes)  # once, for every target
    compiled = _compile(imported, tvm_target, disabled, tuning, quantize, precision)
    if compiled.uses_amx:
        # Where the OS denies AMX (a VM with it off), the model runs this instead of failing;
        # compiled only when an export or such a run needs it.
        compiled.compile_fallback_later(
            lambda: _compile(imported, without_amx(tvm_target), disabled, tuning, quantize, precision))
    return compiled


def _compile(imported, tvm_target: tvm.target.Target, disabled, tuning: TuningDatabase,
             quantize: QuantConfig | None, precision: str) -> CompiledModel:
    """`imported` compiled for `tvm_target` (`quantize` already calibrated)."""
    onnx_model, mod = imported.onnx, imported.mod
    int8 = realize_int8(imported, quantize, tvm_target)
    bf16 = bf16_pass(precision, tvm_target)
    try:
        mod = optimize(mod, tvm_target, disabled, tuning, int8, bf16)
        report = fusion_report(mod, onnx_model, vector_lanes(tvm_target), disabled)
        report.tuned_kernels, report.default_kernels = count_tuned_kernels(mod)
        mod = lowered(mod, tvm_target, onnx_model)
        report.kernel_calls = count_kernel_calls(mod)
        amx = uses_tiles(mod)
        executable, weights = compile_weights_apart(mod, tvm_target)
    except TvmFuseError:
        raise
    except Exception as error:
        brief = target_string(tvm_target, brief=True)
        failed = CompileError.of(error, "compiling", brief, nodes_named_in(str(error), onnx_model))
        raise CompileError(f"{failed}{symbolic_dims_hint(imported.inputs)}") from error
    return CompiledModel(
        executable,
        imported.inputs,
        relax_outputs(mod, onnx_model),
        target_string(tvm_target),
        isa_features(tvm_target),
        report,
        "bf16" if bf16 else "fp32",
        uses_amx=amx,
        weights=weights,
    )
