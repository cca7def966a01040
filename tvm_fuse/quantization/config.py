"""What `build(quantize=...)` takes: how to calibrate, on what, and what to leave in fp32."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..errors import InputError

METHODS = ("entropy", "minmax", "percentile")


@dataclass(frozen=True)
class QuantConfig:
    """int8 inference settings.

    Args:
        calibration: samples of the model's inputs (see `tvm_fuse.quantize`), or a table
            that `tvm_fuse.quantize` made (a `CalibrationTable` or the path of its .json).
        method: how a tensor's range is chosen from its calibration values: "entropy" (the
            clipping threshold whose u8 histogram is closest to the real one in KL divergence,
            as MXNet and TensorRT), "minmax" (the whole range) or "percentile" (`percentile`
            of the absolute values).
        per_channel: weight scales per output channel (else one per layer).
        exclude: ONNX node names or op types (e.g. "Conv") whose kernels stay fp32.
        percentile: for method="percentile", in percent.
        max_samples: calibrate on at most this many feeds.
    """

    calibration: object = None
    method: str = "entropy"
    per_channel: bool = True
    exclude: Sequence[str] = ()
    percentile: float = 99.99
    max_samples: int | None = None

    def __post_init__(self):
        if self.method not in METHODS:
            raise InputError(f"calibration method {self.method!r}: choose one of {', '.join(METHODS)}")
        if not 0 < self.percentile <= 100:
            raise InputError(f"percentile {self.percentile} must lie in (0, 100]")
        if self.calibration is None:
            raise InputError("QuantConfig needs calibration: input samples, or a table from tvm_fuse.quantize")
        object.__setattr__(self, "exclude", tuple(self.exclude))
