"""Fashion-MNIST from the IDX files Debian's `dataset-fashion-mnist` installs.

Images come as float32 (N, 1, 28, 28), scaled to [0, 1] and then standardized with the
training set's mean and standard deviation (`MEAN`, `STD`), as the bundled Fashion-MNIST
models were trained (`bench/fashion_mnist.py train`); labels as int64 class indices 0-9.
"""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np

ROOT = Path("/usr/share/datasets/fashion-mnist")
SPLITS = {"train": "train", "test": "t10k"}  # split -> file prefix
MEAN, STD = 0.2860, 0.3530  # of the 60k training images in [0, 1]
CLASSES = ("T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag",
           "Ankle boot")


def available(root: Path = ROOT) -> bool:
    """Whether every file of both splits is there."""
    return all((root / f"{prefix}-{kind}-ubyte.gz").is_file()
               for prefix in SPLITS.values() for kind in ("images-idx3", "labels-idx1"))


def load(split: str = "test", root: Path = ROOT) -> tuple[np.ndarray, np.ndarray]:
    """(images float32 (N, 1, 28, 28) standardized, labels int64 (N,)) of "train" (60k) or "test" (10k).

    Raises:
        FileNotFoundError naming the missing file and the package that installs it.
    """
    if split not in SPLITS:
        raise ValueError(f"split {split!r}: choose one of {', '.join(SPLITS)}")
    root = Path(root)
    pixels = _read_idx(root / f"{SPLITS[split]}-images-idx3-ubyte.gz", rank=3)
    labels = _read_idx(root / f"{SPLITS[split]}-labels-idx1-ubyte.gz", rank=1)
    if len(pixels) != len(labels):
        raise ValueError(f"{root}: {len(pixels)} {split} images but {len(labels)} labels")
    images = (pixels.astype(np.float32) / 255 - MEAN) / STD
    return images[:, None], labels.astype(np.int64)


def _read_idx(path: Path, rank: int) -> np.ndarray:
    """An IDX file of unsigned bytes: magic 0x0000 0x08 <rank>, `rank` big-endian u32 dims, data."""
    try:
        data = gzip.open(path).read()
    except FileNotFoundError:
        raise FileNotFoundError(f"Fashion-MNIST file {path} is missing: apt-get install dataset-fashion-mnist") from None
    if data[:4] != bytes([0, 0, 0x08, rank]):
        raise ValueError(f"{path}: not an IDX file of u8 with {rank} dims (magic {data[:4].hex()})")
    shape = tuple(int(d) for d in np.frombuffer(data, ">u4", rank, offset=4))
    return np.frombuffer(data, np.uint8, offset=4 + 4 * rank).reshape(shape)
