from __future__ import annotations

import numpy as np
import pytest

from tvm_fuse import InputError, TensorInfo
from tvm_fuse.quantization.calibration_data import calibration_feeds

IMAGE = [TensorInfo("data", (1, 3, 8, 8), "float32")]
DYNAMIC = [TensorInfo("data", ("batch", 3, 8, 8), "float32")]


def _samples(count):
    return np.random.default_rng(0).standard_normal((count, 3, 8, 8)).astype(np.float32)


def test_stacked_samples_feed_one_batch_at_a_time():
    feeds = list(calibration_feeds(_samples(5), IMAGE))
    assert len(feeds) == 5 and feeds[2]["data"].shape == (1, 3, 8, 8)
    assert [f["data"].shape[0] for f in calibration_feeds(_samples(10), DYNAMIC)] == [8]


def test_max_samples_limits_the_feeds():
    assert len(list(calibration_feeds(_samples(5), IMAGE, max_samples=2))) == 2


def test_a_folder_of_npy_and_npz_files(tmp_path):
    np.save(tmp_path / "a.npy", _samples(2))
    np.savez(tmp_path / "b.npz", data=_samples(3))
    (tmp_path / "notes.txt").write_text("ignored")
    assert len(list(calibration_feeds(tmp_path, IMAGE))) == 5
    assert len(list(calibration_feeds(tmp_path / "b.npz", IMAGE))) == 3


def test_an_iterable_of_feeds():
    feeds = ({"data": s[None]} for s in _samples(3))
    assert len(list(calibration_feeds(feeds, IMAGE))) == 3


@pytest.mark.parametrize("source, message", [
    (np.zeros((2, 3, 9, 9), np.float32), r"calibration feed 1: input 'data' has shape \[1, 3, 9, 9\]"),
    (np.zeros((2, 3, 8, 8), np.float64), r"calibration feed 1: input 'data' has dtype float64"),
    ([{"image": np.zeros((1, 3, 8, 8), np.float32)}], r"missing input\(s\) \['data'\]"),
    (np.zeros((0, 3, 8, 8), np.float32), "fewer than the model's batch"),
    ([], "holds no samples"),
    (42, "expected arrays, feeds or a folder"),
])
def test_bad_calibration_data_is_named(source, message):
    with pytest.raises(InputError, match=message):
        list(calibration_feeds(source, IMAGE))


def test_a_missing_or_empty_folder(tmp_path):
    with pytest.raises(InputError, match="neither a folder nor a .npy / .npz file"):
        list(calibration_feeds(tmp_path / "nope", IMAGE))
    with pytest.raises(InputError, match="no .npy or .npz"):
        list(calibration_feeds(tmp_path, IMAGE))
