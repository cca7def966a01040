"""ONNX Runtime's own int8 model of an fp32 ONNX model: the reference tvm_fuse's int8 is timed
against.

ONNX Runtime's static quantization with the types its documentation recommends for x86 CPUs
with VNNI: `quant_pre_process` (ONNX shape inference and ONNX Runtime's basic graph
optimizations), then `quantize_static` in QDQ format (QuantizeLinear / DequantizeLinear around
each quantized node, which ONNX Runtime's CPU provider fuses into int8 kernels), u8
activations, s8 weights, reduced range (7-bit weights) only on a host without VNNI, as ONNX
Runtime advises: there its u8 x s8 products sum in int16 and saturate. Weights get a scale per output channel, as ours do
(ONNX Runtime notes that one per tensor runs a little faster). Calibration reads the same samples, in the
same forms, as `tvm_fuse.quantize` and maps our method onto ONNX Runtime's: minmax -> MinMax,
entropy -> Entropy, percentile -> Percentile (with our percentile). The histograms keep ONNX
Runtime's sizes (`quantize_static` does not expose them), and so its Entropy is not ours: its
histograms start with 128 bins, as many as its quantized bins, which leaves the KL search one
candidate threshold, the whole range, until a later feed widens the histogram; its entropy
ranges are minmax's or close to them.

Both tools write models to disk; that happens in a temporary folder, and the quantized model
comes back in memory. ONNX Runtime is optional (`pip install 'tvm_fuse[bench]'`).
"""

from __future__ import annotations

import contextlib
import io
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path

import onnx

from ..errors import InputError
from ..frontend.importer import graph_inputs
from ..quantization.calibration_data import calibration_feeds
from ..quantization.config import METHODS
from ..target import host_features

ORT_METHODS = {"minmax": "MinMax", "entropy": "Entropy", "percentile": "Percentile"}
PER_CHANNEL_OPSET = 13  # DequantizeLinear's axis, which per-channel weights need
MAX_IR_VERSION = 10  # opset 21's; ONNX Runtime 1.31 reads IR <= 13 (older ones less), the onnx wheel writes 14
ORT_INT8_SCHEME = "static QDQ, u8 activations, s8 per-channel weights"
ORT_DYNAMIC_INT8_SCHEME = "quantize_dynamic, u8 activations scaled per run, s8 weights"


class _FeedReader:
    """ONNX Runtime's CalibrationDataReader interface (it checks for `get_next` alone) over
    our checked calibration feeds."""

    def __init__(self, feeds: Iterator[dict]):
        self._feeds = feeds

    def get_next(self) -> dict | None:
        return next(self._feeds, None)


def ort_int8_model(model: onnx.ModelProto, calibration, method: str = "entropy", *,
                   percentile: float = 99.99, max_samples: int | None = None,
                   exclude: Iterable[str] = ()) -> onnx.ModelProto:
    """ONNX Runtime's static QDQ int8 model of `model`, calibrated on `calibration`.

    Args:
        calibration: input samples in any form `tvm_fuse.quantize` takes (not a table: ONNX
            Runtime calibrates its own ranges).
        method, percentile, max_samples: as in `QuantConfig`.
        exclude: ONNX node names or op types left in fp32, as `QuantConfig.exclude`.

    Raises:
        ImportError without ONNX Runtime; InputError for a table or bad calibration data.
    """
    try:
        from onnxruntime import quantization as ort
    except ImportError:
        raise ImportError(
            "ONNX Runtime's int8 reference needs it installed: pip install 'tvm_fuse[bench]'"
        ) from None
    if method not in METHODS:
        raise InputError(f"calibration method {method!r}: choose one of {', '.join(METHODS)}")
    if isinstance(calibration, (str, Path)) and Path(calibration).suffix == ".json":
        raise InputError(f"ONNX Runtime calibrates on input samples, and {calibration} is a table of scales: "
                         "give the samples the table was made from")
    feeds = calibration_feeds(calibration, graph_inputs(model), max_samples)
    with tempfile.TemporaryDirectory(prefix="tvm_fuse_ort_int8_") as folder:
        source, prepared, quantized = (Path(folder) / f"{step}.onnx" for step in ("fp32", "prepared", "int8"))
        onnx.save(_prepared(model), source)
        # sympy's symbolic shape inference serves dynamic transformer shapes; ONNX's own
        # shape inference still runs, and onnxruntime does not depend on sympy.
        ort.quant_pre_process(source, prepared, skip_symbolic_shape=True)
        skipped = set(exclude)  # named after the nodes of the prepared graph, which may fuse some
        excluded = [n.name for n in onnx.load(prepared).graph.node if n.name in skipped or n.op_type in skipped]
        with contextlib.redirect_stdout(io.StringIO()):  # the calibrators print their progress
            ort.quantize_static(
                prepared, quantized, _FeedReader(feeds),
                quant_format=ort.QuantFormat.QDQ, activation_type=ort.QuantType.QUInt8,
                weight_type=ort.QuantType.QInt8, per_channel=True, nodes_to_exclude=excluded,
                # ONNX Runtime's advice for CPUs without VNNI, whose u8 x s8 products saturate in int16
                reduce_range="avx512_vnni" not in host_features(),
                calibrate_method=ort.CalibrationMethod[ORT_METHODS[method]],
                extra_options={"CalibPercentile": percentile} if method == "percentile" else None,
            )
        return onnx.load(quantized)


def ort_dynamic_int8_model(model: onnx.ModelProto, exclude: Iterable[str] = ()) -> onnx.ModelProto:
    """ONNX Runtime's dynamic int8 model of `model` (`quantize_dynamic`, s8 weights): what its
    users take for transformers, the reference of `QuantConfig(activations="dynamic")`."""
    try:
        from onnxruntime.quantization import QuantType, quantize_dynamic
    except ImportError:
        raise ImportError(
            "ONNX Runtime's int8 reference needs it installed: pip install 'tvm_fuse[bench]'"
        ) from None
    skipped = set(exclude)
    excluded = [n.name for n in model.graph.node if n.name in skipped or n.op_type in skipped]
    with tempfile.TemporaryDirectory(prefix="tvm_fuse_ort_int8_") as folder:
        source, quantized = Path(folder) / "fp32.onnx", Path(folder) / "int8.onnx"
        onnx.save(_prepared(model), source)
        quantize_dynamic(source, quantized, weight_type=QuantType.QInt8, nodes_to_exclude=excluded)
        return onnx.load(quantized)


def _prepared(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of `model` that ONNX Runtime's quantizer handles as it would a current export:
    opset 13 or later (DequantizeLinear's axis, which per-channel weights need); an IR version
    of that opset, at most one ONNX Runtime reads, with weights no longer listed among the
    graph inputs (IR 3, as in the light models, lists them there); and two-input `Sum` as
    `Add` (the light ResNet-50's residual adds: ONNX Runtime quantizes Add, but leaves Sum in
    fp32 between a DequantizeLinear and a QuantizeLinear)."""
    version = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), PER_CHANNEL_OPSET)
    if version < PER_CHANNEL_OPSET:
        model = onnx.version_converter.convert_version(model, PER_CHANNEL_OPSET)
    else:
        model = onnx.ModelProto.FromString(model.SerializeToString())
    if model.ir_version < 4:
        weights = {t.name for t in model.graph.initializer}
        inputs = [i for i in model.graph.input if i.name not in weights]
        del model.graph.input[:]
        model.graph.input.extend(inputs)
    needed = onnx.helper.find_min_ir_version_for(model.opset_import, ignore_unknown=True)
    model.ir_version = min(max(model.ir_version, needed), MAX_IR_VERSION)
    for node in model.graph.node:
        if node.op_type == "Sum" and len(node.input) == 2:
            node.op_type = "Add"
    return model
