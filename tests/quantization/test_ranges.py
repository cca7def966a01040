"""Calibration methods on distributions whose right answer is known."""

from __future__ import annotations

import numpy as np
import pytest

from tvm_fuse.calibration_table import TensorScale
from tvm_fuse.quantization.ranges import entropy_range, minmax_range, percentile_range
from tvm_fuse.quantization.statistics import TensorStatistics


def _stats(*batches) -> TensorStatistics:
    stats = TensorStatistics()
    for batch in batches:
        stats.add(np.asarray(batch, np.float32))
    return stats


def test_minmax_covers_every_value():
    stats = _stats([-1.5, 0.2], [3.0, 0.0])
    assert minmax_range(stats) == (-1.5, 3.0)


def test_percentile_clips_rare_outliers():
    rng = np.random.default_rng(0)
    values = np.abs(rng.standard_normal(100_000))
    values[:10] = 1000.0  # 0.01% outliers
    low, high = percentile_range(_stats(values), 99.9)
    assert low == 0.0
    assert 3.0 < high < 4.0  # |N(0,1)|'s 99.9th percentile is 3.29, within a bin of 0.49


def test_entropy_threshold_ignores_exact_zeros():
    """Half of a ReLU's output is exactly 0, which every grid holds exactly: the threshold
    must be the one of the positive values alone (counted in the first bin, the zeros pulled
    it down to a quarter of the range on ResNet-18)."""
    positive = np.abs(np.random.default_rng(0).standard_normal(200_000))
    relu = np.concatenate([positive, np.zeros(200_000)])
    assert entropy_range(_stats(relu)) == pytest.approx(entropy_range(_stats(positive)), rel=0.02)
    assert entropy_range(_stats(positive))[1] > 0.6 * positive.max()


def test_entropy_threshold_ignores_values_many_elements_share():
    """A constant background gives each channel of the first conv one value on most pixels:
    spikes of 2% each. The threshold lands where it would without them, not just above them."""
    rng = np.random.default_rng(3)
    tail = np.abs(rng.standard_normal(100_000)) * 1.5
    spikes = np.repeat(np.linspace(0.1, 1.1, 10), 2_000)
    with_spikes = entropy_range(_stats(np.concatenate([tail, spikes])))[1]
    assert with_spikes > 3.0 and with_spikes == pytest.approx(entropy_range(_stats(tail))[1], rel=0.1)


def test_entropy_threshold_clips_a_long_tail_but_keeps_the_bulk():
    rng = np.random.default_rng(0)
    values = np.maximum(rng.standard_normal(200_000), 0)  # ReLU'd normal: range [0, T]
    values[:5] = 50.0
    low, high = entropy_range(_stats(values))
    assert low == 0.0
    assert 2.5 < high < 25.0  # far below the outliers, beyond most of the mass


def test_entropy_of_a_signed_tensor_is_symmetric():
    rng = np.random.default_rng(1)
    low, high = entropy_range(_stats(rng.standard_normal(100_000)))
    assert low == -high and 2.0 < high < 5.0


def test_entropy_keeps_the_sides_of_a_signed_tensor_apart():
    """A standardized Fashion-MNIST image: most pixels are the background's -0.81, the rest
    spread up to 2.02. Folded onto |x|, the values clipped above T=0.81 hid in the
    background's spike at 0.81, and entropy clipped 28% of the pixels."""
    rng = np.random.default_rng(2)
    image = np.concatenate([np.full(70_000, -0.81), rng.uniform(-0.81, 2.02, 30_000)])
    low, high = entropy_range(_stats(image))
    assert high >= 1.8 and low == -high


def test_histogram_keeps_its_mass_when_a_later_feed_widens_the_range():
    stats = _stats(np.linspace(0, 1, 1000), np.linspace(0, 8, 1000))
    assert stats.histogram.sum() == 2000
    assert stats.bound == 8.0


def test_inf_or_nan_is_refused():
    with pytest.raises(FloatingPointError):
        _stats([1.0, np.nan])


@pytest.mark.parametrize("low, high", [(0.0, 0.0), (5.0, 5.0), (-2.0, -2.0)])
def test_constant_tensors_get_finite_scales(low, high):
    scale = TensorScale.from_range(low, high)
    assert np.isfinite(scale.scale) and scale.scale > 0 and 0 <= scale.zero_point <= 255


def test_zero_is_exact_on_the_u8_grid():
    scale = TensorScale.from_range(-1.0, 3.0)
    assert scale.zero_point == round(1.0 / scale.scale)
    assert abs(scale.scale - 4.0 / 255) < 1e-9
    assert TensorScale.from_range(0.0, 6.0).zero_point == 0
