"""Calibration data as the user has it -> feeds for the model, each checked like a run's.

Accepted: one array of samples (one-input models) or a dict of them, stacked along the batch
axis; an iterable of feeds (dicts, as `run` takes); a folder of `.npy` files (one array of
samples each) or `.npz` files (one entry per input), or the path of one such file."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from itertools import islice
from pathlib import Path

import numpy as np

from ..errors import InputError
from ..feed import check_feed
from ..tensor_info import TensorInfo

DYNAMIC_BATCH = 8  # samples per feed when the batch dim is symbolic


def calibration_feeds(source, inputs: list[TensorInfo], max_samples: int | None = None) -> Iterator[dict]:
    """The checked feeds of `source`; InputError names the sample and input at fault."""
    feeds = islice(_feeds(source, inputs), max_samples)
    count = 0
    for count, feed in enumerate(feeds, 1):
        try:
            arrays = check_feed(inputs, feed)
        except InputError as error:
            raise InputError(f"calibration feed {count}: {error}") from None
        yield {info.name: array for info, array in zip(inputs, arrays)}
    if count == 0:
        raise InputError("the calibration data holds no samples")


def _feeds(source, inputs: list[TensorInfo]) -> Iterator[Mapping]:
    if isinstance(source, (str, Path)):
        yield from _folder(Path(source), inputs)
    elif isinstance(source, np.ndarray):
        yield from _stacked(_single_input(inputs, source), inputs)
    elif isinstance(source, Mapping):
        yield from _stacked(source, inputs)
    elif isinstance(source, Iterable):
        yield from source
    else:
        raise InputError(f"calibration data: expected arrays, feeds or a folder, not {type(source).__name__}")


def _single_input(inputs: list[TensorInfo], array: np.ndarray) -> dict:
    if len(inputs) != 1:
        raise InputError(f"the model takes {len(inputs)} inputs ({[i.name for i in inputs]}): "
                         "give calibration data as a dict of input name -> samples")
    return {inputs[0].name: array}


def _stacked(samples: Mapping, inputs: list[TensorInfo]) -> Iterator[dict]:
    """Arrays of samples stacked on the batch axis -> feeds of the model's batch size."""
    counts = {name: len(np.asarray(array)) for name, array in samples.items()}
    if len(set(counts.values())) > 1:
        raise InputError(f"calibration inputs hold different numbers of samples: {counts}")
    total = next(iter(counts.values()), 0)
    batches = {i.shape[0] for i in inputs if i.shape and isinstance(i.shape[0], int)}
    batch = min(batches) if batches else DYNAMIC_BATCH
    for start in range(0, total - batch + 1, batch):
        yield {name: np.asarray(array)[start:start + batch] for name, array in samples.items()}
    if total < batch:
        raise InputError(f"calibration data holds {total} samples, fewer than the model's batch of {batch}")


def sample_files(folder: Path) -> list[Path]:
    """The .npy / .npz files of a folder, or the one such file `folder` is; InputError if neither."""
    if folder.is_file() and folder.suffix in (".npy", ".npz"):
        return [folder]
    if folder.is_dir():
        return sorted(p for p in folder.iterdir() if p.suffix in (".npy", ".npz"))
    raise InputError(f"calibration data {folder} is neither a folder nor a .npy / .npz file")


def _folder(folder: Path, inputs: list[TensorInfo]) -> Iterator[dict]:
    """A folder of .npy / .npz files, or one such file."""
    files = sample_files(folder)
    if not files:
        raise InputError(f"calibration folder {folder} holds no .npy or .npz files")
    for path in files:
        try:
            if path.suffix == ".npy":
                samples = _single_input(inputs, np.load(path, allow_pickle=False))
            else:
                with np.load(path, allow_pickle=False) as archive:
                    samples = {name: archive[name] for name in archive.files}
        except (OSError, ValueError) as error:
            raise InputError(f"cannot read calibration file {path}: {error}") from None
        yield from _stacked(samples, inputs)
