"""Runtimes timed side by side, and their top-1 agreement, with stand-in runtimes."""

from __future__ import annotations

import numpy as np

from tvm_fuse.benchmarking.compare import time_alternating, top1_agreement


class Recorder:
    """A runtime that logs its calls and returns fixed outputs."""

    def __init__(self, name: str, log: list[str], outputs=None):
        self.name, self.log, self.outputs = name, log, outputs

    def run(self, output_names, feed):
        self.log.append(self.name)
        return self.outputs(feed) if self.outputs else [np.zeros(1)]


def test_runtimes_take_turns_in_blocks():
    log: list[str] = []
    runtimes = {name: Recorder(name, log) for name in ("a", "b", "c")}
    times = time_alternating(runtimes, {}, num_threads=1, warmup=1, repeat=3, block=2)
    assert {name: t.runs for name, t in times.items()} == {"a": 3, "b": 3, "c": 3}
    # warm-up; then per block one untimed run and the timed ones, in the given order
    assert "".join(log) == "abc" + "aaabbbccc" + "aabbcc"


def test_top1_agreement_counts_rows_across_feeds():
    def logits(winners):
        return lambda feed: [np.eye(4)[winners[feed["i"]]][:, :, None, None]]  # (batch, classes, 1, 1)

    reference = Recorder("fp32", [], logits({0: [0, 1], 1: [2, 3]}))
    int8 = Recorder("int8", [], logits({0: [0, 1], 1: [2, 0]}))
    assert top1_agreement(int8, reference, [{"i": 0}, {"i": 1}]) == (0.75, 4)
