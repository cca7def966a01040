"""Calibration methods: a tensor's statistics -> the real range its u8 codes cover.

Entropy and percentile look at the histogram of absolute values; the range is [0, T] for a
tensor never negative (after a ReLU) and [-T, T] otherwise."""

from __future__ import annotations

import numpy as np

from .statistics import TensorStatistics

UNSIGNED_LEVELS = 256  # u8 codes of a non-negative tensor
SIGNED_LEVELS = 128  # codes per side of a tensor with negatives (zero point near 128)


def minmax_range(stats: TensorStatistics) -> tuple[float, float]:
    return stats.minimum, stats.maximum


def percentile_range(stats: TensorStatistics, percentile: float) -> tuple[float, float]:
    """T: the `percentile` of |x| (the upper edge of the bin reaching it)."""
    cumulative = np.cumsum(stats.histogram)
    if cumulative[-1] == 0:
        return 0.0, 0.0
    index = int(np.searchsorted(cumulative, cumulative[-1] * percentile / 100.0))
    return _around_zero(stats, min(index + 1, len(cumulative)) * stats.bin_width)


def entropy_range(stats: TensorStatistics) -> tuple[float, float]:
    """T minimizing KL(P || Q): P the histogram clipped at T (the clipped mass in the last
    bin), Q the same bins quantized to the tensor's levels (as TensorRT's calibrator, and
    MXNet's after it). Exact zeros are left out: every grid holds 0 exactly, and counted in
    the first bin they would pull T down (Q spreads that bin's spike over the bins merged
    with it, so the fewer bins per level, the smaller the divergence)."""
    histogram = stats.histogram.astype(np.float64)
    histogram[0] -= stats.zeros
    levels = UNSIGNED_LEVELS if stats.minimum >= 0 else SIGNED_LEVELS
    if histogram.sum() == 0 or len(histogram) <= levels:
        return minmax_range(stats)
    best, best_divergence = len(histogram), np.inf
    for bins in range(levels, len(histogram) + 1):
        reference = histogram[:bins].copy()
        reference[-1] += histogram[bins:].sum()
        divergence = _kl_divergence(reference, _quantized(histogram[:bins], levels))
        if divergence < best_divergence:
            best, best_divergence = bins, divergence
    return _around_zero(stats, best * stats.bin_width)


def _quantized(histogram: np.ndarray, levels: int) -> np.ndarray:
    """`histogram` merged into `levels` groups of bins, each group's mass spread evenly over
    its nonzero bins (an empty bin stays empty)."""
    groups = np.minimum(np.arange(len(histogram)) * levels // len(histogram), levels - 1)
    nonzero = histogram > 0
    mass = np.bincount(groups, weights=histogram, minlength=levels)
    count = np.bincount(groups, weights=nonzero, minlength=levels)
    share = np.divide(mass, count, out=np.zeros(levels), where=count > 0)
    return np.where(nonzero, share[groups], 0.0)


def _kl_divergence(p: np.ndarray, q: np.ndarray) -> float:
    if q.sum() == 0:  # all the mass lies beyond the threshold
        return np.inf
    p = p / p.sum()
    q = q / q.sum()
    mask = p > 0
    # A bin P has and Q lost is infinitely surprising; smooth Q a little instead.
    q = np.where(mask & (q == 0), 1e-12, q)
    return float(np.sum(p[mask] * np.log(p[mask] / q[mask])))


def _around_zero(stats: TensorStatistics, threshold: float) -> tuple[float, float]:
    return (0.0 if stats.minimum >= 0 else -threshold), threshold
