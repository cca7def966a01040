"""The cost model learns which settings run fast from a few measurements."""

from __future__ import annotations

from tvm_fuse.tuner.cost_model import MIN_SAMPLES, CostModel


def _latency(knobs):
    """A made-up kernel: fastest with width 7 and 2 channel blocks."""
    return 1.0 + abs(knobs["width_tile"] - 7) + 2 * abs(knobs["channel_tile"] - 2)


def test_it_waits_for_enough_samples_then_picks_the_fastest_untried_setting():
    space = [{"width_tile": w, "channel_tile": c} for w in range(1, 15) for c in (1, 2, 4)]
    extents = [1, 8, 14, 14, 16, 16, 3, 3, 16]
    model = CostModel()
    measured = [k for k in space if k["width_tile"] in (1, 4, 12, 14) or k == {"width_tile": 6, "channel_tile": 1}]
    for knobs in measured[:MIN_SAMPLES - 1]:
        model.add("tvm_fuse.conv_nchwc", extents, knobs, _latency(knobs))
    assert model.best("tvm_fuse.conv_nchwc", extents, space) is None
    for knobs in measured[MIN_SAMPLES - 1:]:
        model.add("tvm_fuse.conv_nchwc", extents, knobs, _latency(knobs))
    untried = [k for k in space if k not in measured]
    best = model.best("tvm_fuse.conv_nchwc", extents, untried)
    assert _latency(best) <= 2.0  # width 6-8 with 2 blocks, never measured as such
