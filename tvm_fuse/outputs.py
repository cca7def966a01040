"""A run's outputs as numpy arrays without a copy where that is safe.

An output the VM allocated for this run is the caller's alone: the VM's pool takes its memory
back only once the array is gone, so it is returned as a view (a copy of a large output cost
as much as the kernel that wrote it). An output that shares memory with an input (the
caller's array, passed without a copy, or this thread's input buffer, which the next run
overwrites), with a weight, or with an output returned before it is copied, as ONNX Runtime's
outputs never alias anything."""

from __future__ import annotations

import bisect

import numpy as np


class Spans:
    """Disjoint byte ranges [start, end) of some arrays' memory, for overlap queries."""

    def __init__(self, arrays=()):
        self.starts: list[int] = []
        self.ends: list[int] = []
        for array in arrays:
            self.add(array)

    def add(self, array: np.ndarray) -> None:
        start, end = _span(array)
        if start == end:
            return
        at = bisect.bisect_left(self.starts, start)
        # Merged with every span it touches, so that the spans stay disjoint and sorted.
        low = at - 1 if at and self.ends[at - 1] >= start else at
        high = at
        while high < len(self.starts) and self.starts[high] <= end:
            high += 1
        if low < high:
            start, end = min(start, self.starts[low]), max(end, self.ends[high - 1])
        self.starts[low:high], self.ends[low:high] = [start], [end]

    def overlaps(self, array: np.ndarray) -> bool:
        start, end = _span(array)
        at = bisect.bisect_right(self.starts, end - 1) - 1
        return start < end and at >= 0 and self.ends[at] > start


def _span(array: np.ndarray) -> tuple[int, int]:
    """The bytes from the array's first element to past its last (a dense array's)."""
    return array.ctypes.data, array.ctypes.data + array.nbytes


def unshared(outputs: list[np.ndarray], inputs: list[np.ndarray], weights: Spans) -> list[np.ndarray]:
    """`outputs` (views of the VM's tensors), each copied where it shares memory with one of
    `inputs`, with `weights` or with an output before it."""
    taken = Spans(inputs)
    owned = []
    for output in outputs:
        if weights.overlaps(output) or taken.overlaps(output):
            output = output.copy()
        taken.add(output)
        owned.append(output)
    return owned
