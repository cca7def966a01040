"""Statistics of a tensor over the calibration feeds, in one pass (a feed iterable may be a
generator): its extremes, the histogram of its absolute values over [0, max |x|], spread
onto the wider range whenever a feed goes beyond it (as ONNX Runtime's calibrator does), and
how many values are exactly zero (half of a ReLU's output)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

HISTOGRAM_BINS = 2048


@dataclass
class TensorStatistics:
    minimum: float = np.inf
    maximum: float = -np.inf
    histogram: np.ndarray = field(default_factory=lambda: np.zeros(HISTOGRAM_BINS, np.float64))
    zeros: int = 0  # also counted in the histogram's first bin

    @property
    def bound(self) -> float:
        """max |x|: the histogram's upper edge."""
        return max(abs(self.minimum), abs(self.maximum)) if np.isfinite(self.minimum) else 0.0

    @property
    def bin_width(self) -> float:
        return self.bound / len(self.histogram)

    def add(self, values: np.ndarray) -> None:
        """Raises FloatingPointError for inf or NaN values."""
        if not np.all(np.isfinite(values)):
            raise FloatingPointError("holds inf or NaN")
        old_bound = self.bound
        self.zeros += int(np.count_nonzero(values == 0))
        self.minimum = min(self.minimum, float(values.min()))
        self.maximum = max(self.maximum, float(values.max()))
        if self.bound == 0:
            return
        if self.bound > old_bound > 0:  # each old bin's count moves to the new bin of its centre
            centres = (np.arange(len(self.histogram)) + 0.5) * (old_bound / len(self.histogram))
            self.histogram, _ = np.histogram(centres, bins=len(self.histogram), range=(0.0, self.bound),
                                             weights=self.histogram)
        counts, _ = np.histogram(np.abs(values), bins=len(self.histogram), range=(0.0, self.bound))
        self.histogram += counts
