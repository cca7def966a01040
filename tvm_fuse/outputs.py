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
    """Disjoint byte ranges [start, end) of memory, for overlap queries."""

    def __init__(self, spans=()):
        self.starts: list[int] = []
        self.ends: list[int] = []
        for start, end in spans:
            self.add(start, end)

    def add(self, start: int, end: int) -> None:
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

    def overlaps(self, start: int, end: int) -> bool:
        at = bisect.bisect_right(self.starts, end - 1) - 1
        return start < end and at >= 0 and self.ends[at] > start


def tensor_span(tensor, nbytes: int) -> tuple[int, int]:
    """The bytes [start, end) of a dense TVM tensor of `nbytes`, its address read from the
    tensor itself (a numpy array's `.ctypes` took a microsecond, four times a run)."""
    start = tensor.data_ptr()
    return start, start + nbytes


def unshared(outputs: list[tuple[np.ndarray, tuple[int, int]]], taken: Spans, weights: Spans) -> list[np.ndarray]:
    """`outputs` (views of the VM's tensors, each with its span), each copied where it shares
    memory with `taken` (the inputs' spans; the outputs' are added), with `weights` or with an
    output before it."""
    owned = []
    for output, (start, end) in outputs:
        if weights.overlaps(start, end) or taken.overlaps(start, end):
            output = output.copy()  # fresh memory: nothing after it can share it
        else:
            taken.add(start, end)
        owned.append(output)
    return owned
