"""Statistics of a tensor over the calibration feeds, in one pass (a feed iterable may be a
generator): its extremes, its histogram over [-max |x|, max |x|] (zero a bin edge), spread
onto the wider range whenever a feed goes beyond it (as ONNX Runtime's calibrator does)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

HISTOGRAM_BINS = 2048  # per side of zero


@dataclass
class TensorStatistics:
    minimum: float = np.inf
    maximum: float = -np.inf
    histogram: np.ndarray = field(default_factory=lambda: np.zeros(2 * HISTOGRAM_BINS, np.float64))

    @property
    def bound(self) -> float:
        """max |x|: the histogram's upper edge."""
        return max(abs(self.minimum), abs(self.maximum)) if np.isfinite(self.minimum) else 0.0

    @property
    def bin_width(self) -> float:
        return self.bound / HISTOGRAM_BINS

    @property
    def magnitudes(self) -> np.ndarray:
        """The histogram of |x| over [0, max |x|], HISTOGRAM_BINS bins."""
        return self.histogram[HISTOGRAM_BINS:] + self.histogram[HISTOGRAM_BINS - 1::-1]

    def add(self, values: np.ndarray) -> None:
        """Raises FloatingPointError for inf or NaN values."""
        if not np.all(np.isfinite(values)):
            raise FloatingPointError("holds inf or NaN")
        old_bound = self.bound
        self.minimum = min(self.minimum, float(values.min()))
        self.maximum = max(self.maximum, float(values.max()))
        if self.bound == 0:
            return
        edges = (-self.bound, self.bound)
        if self.bound > old_bound > 0:  # each old bin's count moves to the new bin of its centre
            centres = (np.arange(-HISTOGRAM_BINS, HISTOGRAM_BINS) + 0.5) * (old_bound / HISTOGRAM_BINS)
            self.histogram, _ = np.histogram(centres, bins=len(self.histogram), range=edges, weights=self.histogram)
        counts, _ = np.histogram(values, bins=len(self.histogram), range=edges)
        self.histogram += counts
