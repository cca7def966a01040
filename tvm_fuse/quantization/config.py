"""What `build(quantize=...)` takes: how to calibrate, on what, and what to leave in fp32."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..errors import InputError

METHODS = ("entropy", "minmax", "percentile")
ACTIVATIONS = ("static", "dynamic")


@dataclass(frozen=True)
class QuantConfig:
    """int8 inference settings.

    Args:
        calibration: samples of the model's inputs (see `tvm_fuse.quantize`), or a table
            that `tvm_fuse.quantize` made (a `CalibrationTable` or the path of its .json).
            Not used with `activations="dynamic"`.
        method: how a tensor's range is chosen from its calibration values: "entropy" (the
            clipping threshold whose u8 histogram is closest to the real one in KL divergence,
            as MXNet and TensorRT), "minmax" (the whole range) or "percentile" (`percentile`
            of the absolute values).
        per_channel: weight scales per output channel (else one per layer).
        exclude: ONNX node names or op types (e.g. "Conv") whose kernels stay fp32.
        percentile: for method="percentile", in percent.
        max_samples: calibrate on at most this many feeds.
        activations: "static" (scales from calibration, the default) or "dynamic": no
            calibration; each dense layer (Gemm / MatMul with constant weights) quantizes its
            input at run time, each group of 64 values of a row (token) on its own range,
            as ONNX Runtime's `quantize_dynamic` does per tensor. Convs stay fp32 then.
    """

    calibration: object = None
    method: str = "entropy"
    per_channel: bool = True
    exclude: Sequence[str] = ()
    percentile: float = 99.99
    max_samples: int | None = None
    activations: str = "static"

    def __post_init__(self):
        if self.method not in METHODS:
            raise InputError(f"calibration method {self.method!r}: choose one of {', '.join(METHODS)}")
        if not 0 < self.percentile <= 100:
            raise InputError(f"percentile {self.percentile} must lie in (0, 100]")
        if self.activations not in ACTIVATIONS:
            raise InputError(f"activations {self.activations!r}: choose one of {', '.join(ACTIVATIONS)}")
        if self.activations == "dynamic" and self.calibration is not None:
            raise InputError("QuantConfig(activations='dynamic') computes its scales at run time: drop calibration")
        if self.activations == "static" and self.calibration is None:
            raise InputError("QuantConfig needs calibration: input samples, or a table from tvm_fuse.quantize "
                             "(or activations='dynamic')")
        object.__setattr__(self, "exclude", tuple(self.exclude))
