"""A calibration table: the u8 scale and zero point of each ONNX tensor that runs in int8.
`tvm_fuse.quantize` makes one; `save` / `load` keep it as JSON, which `build` accepts."""

from __future__ import annotations

import json
import math
import os
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

from .errors import InputError

FORMAT = "tvm_fuse.calibration"
VERSION = 1
U8_LEVELS = 255


@dataclass(frozen=True)
class TensorScale:
    """`real = scale * (code - zero_point)`, codes u8."""

    scale: float
    zero_point: int

    @classmethod
    def from_range(cls, low: float, high: float) -> TensorScale:
        """The u8 grid covering [low, high] (stretched to hold 0, which must be exact). A
        constant or all-zero tensor gets scale 1, never 0, inf or NaN."""
        low, high = min(float(low), 0.0), max(float(high), 0.0)
        if not (math.isfinite(low) and math.isfinite(high)):
            raise InputError(f"calibration range [{low}, {high}] is not finite")
        if high - low <= 0.0:
            return cls(1.0, 0)
        scale = (high - low) / U8_LEVELS
        return cls(scale, min(U8_LEVELS, max(0, round(-low / scale))))


@dataclass
class CalibrationTable:
    tensors: dict[str, TensorScale]
    method: str
    exclude: tuple[str, ...] = ()
    samples: int = 0  # calibration feeds the statistics came from

    def save(self, path: str | Path) -> None:
        """Write atomically: a crash never leaves a half-written table."""
        path = Path(path)
        record = {"format": FORMAT, "version": VERSION, "method": self.method, "exclude": list(self.exclude),
                  "samples": self.samples, "tensors": {n: asdict(s) for n, s in sorted(self.tensors.items())}}
        handle, temporary = tempfile.mkstemp(dir=path.parent or ".", prefix=path.name, suffix=".tmp")
        with os.fdopen(handle, "w") as out:
            json.dump(record, out, indent=1)
        os.replace(temporary, path)

    @classmethod
    def load(cls, path: str | Path) -> CalibrationTable:
        try:
            record = json.loads(Path(path).read_text())
        except (OSError, ValueError) as error:
            raise InputError(f"cannot read the calibration table {path}: {error}") from error
        if not isinstance(record, dict) or record.get("format") != FORMAT:
            raise InputError(f"{path} is not a tvm_fuse calibration table (made by tvm_fuse.quantize)")
        if record.get("version") != VERSION:
            raise InputError(f"{path}: calibration table version {record.get('version')}, this tvm_fuse reads {VERSION}")
        tensors = {name: TensorScale(float(s["scale"]), int(s["zero_point"])) for name, s in record["tensors"].items()}
        return cls(tensors, record["method"], tuple(record.get("exclude", ())), int(record.get("samples", 0)))
