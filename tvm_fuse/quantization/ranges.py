"""Calibration methods: a tensor's statistics -> the real range its u8 codes cover.

Entropy and percentile look at the histogram of absolute values; the range is [0, T] for a
tensor never negative (after a ReLU) and [-T, T] otherwise."""

from __future__ import annotations

import numpy as np

from .statistics import HISTOGRAM_BINS, TensorStatistics

UNSIGNED_LEVELS = 256  # u8 codes of a non-negative tensor
SIGNED_LEVELS = 128  # codes per side of a tensor with negatives (zero point near 128)
SPIKE = 4.0  # a bin this many times its neighbourhood's median holds a point mass
NEIGHBOURS = 8  # bins on each side


def minmax_range(stats: TensorStatistics) -> tuple[float, float]:
    return stats.minimum, stats.maximum


def percentile_range(stats: TensorStatistics, percentile: float) -> tuple[float, float]:
    """T: the `percentile` of |x| (the upper edge of the bin reaching it)."""
    cumulative = np.cumsum(stats.magnitudes)
    if cumulative[-1] == 0:
        return 0.0, 0.0
    index = int(np.searchsorted(cumulative, cumulative[-1] * percentile / 100.0))
    return _around_zero(stats, min(index + 1, len(cumulative)) * stats.bin_width)


def entropy_range(stats: TensorStatistics) -> tuple[float, float]:
    """T minimizing KL(P || Q): P the histogram clipped to [0, T] or [-T, T] (the clipped mass
    in the end bins), Q the same bins quantized to the tensor's levels (as TensorRT's
    calibrator, and MXNet's after it, which also keeps the two sides of a signed tensor apart:
    folded onto |x|, the values clipped on one side would hide in a spike on the other).

    Point masses (`_point_masses`) inside [-T, T] are left out of P and Q: Q spreads a bin's
    mass over the bins merged with it, which costs a spike far more than its rounding does,
    so the fewer bins per level (the smaller T), the smaller the divergence. Counted in, a
    ReLU's zeros pulled T to a quarter of ResNet-18's ranges, and a constant background's
    values (one per channel) to a fifth of a Fashion-MNIST CNN's. Clipped, they still count."""
    histogram = stats.histogram.astype(np.float64)
    signed = stats.minimum < 0
    if not signed:
        histogram = histogram[HISTOGRAM_BINS:]
    smooth = histogram - _point_masses(histogram)
    levels = 2 * SIGNED_LEVELS - 1 if signed else UNSIGNED_LEVELS
    per_side = SIGNED_LEVELS if signed else UNSIGNED_LEVELS
    if histogram.sum() == 0 or HISTOGRAM_BINS <= per_side:
        return minmax_range(stats)
    best, best_divergence = HISTOGRAM_BINS, np.inf
    for bins in range(per_side, HISTOGRAM_BINS + 1):
        start, stop = (HISTOGRAM_BINS - bins, HISTOGRAM_BINS + bins) if signed else (0, bins)
        reference = smooth[start:stop].copy()
        reference[0] += histogram[:start].sum()
        reference[-1] += histogram[stop:].sum()
        divergence = _kl_divergence(reference, _quantized(smooth[start:stop], levels))
        if divergence < best_divergence:
            best, best_divergence = bins, divergence
    return _around_zero(stats, best * stats.bin_width)


def _point_masses(histogram: np.ndarray) -> np.ndarray:
    """Each bin's count beyond its neighbourhood's median where it is over SPIKE times that:
    a value many elements share exactly (else 0)."""
    padded = np.pad(histogram, NEIGHBOURS, mode="reflect")
    local = np.median(np.lib.stride_tricks.sliding_window_view(padded, 2 * NEIGHBOURS + 1), axis=1)
    return np.where(histogram > SPIKE * np.maximum(local, 1.0), histogram - local, 0.0)


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
