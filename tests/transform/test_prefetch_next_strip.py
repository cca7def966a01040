"""PrefetchNextStrip: in a reduction loop the schedule marked, each tile of a strip
prefetches its share of the next strip's weights, a line a step (a step: an iteration of the
marked loop and the loops in it around the weight's load), and together the tiles of a strip
fetch every line of the next one, never past the weight's end; an unmarked loop stays."""

import itertools

import pytest
import tvm
from tvm import tirx
from tvm.script import tirx as T

from tvm_fuse.ir_names import PREFETCH_ATTR
from tvm_fuse.transform.prefetch_next_strip import PrefetchNextStrip, nodes_of

STRIPS, TILES, DEPTH, LANES = 6, 4, 64, 16  # a strip: one block of 16 columns x 64 deep
LINE = 16  # fp32 values in a 64-byte cache line


def _kernel(marked: bool) -> tvm.IRModule:
    annotations = {PREFETCH_ATTR: [STRIPS, DEPTH * LANES]} if marked else {}

    @T.prim_func(s_tir=False)
    def kernel(x: T.handle, w: T.handle, out: T.handle):
        X = T.match_buffer(x, (TILES * DEPTH,), "float32")
        W = T.match_buffer(w, (STRIPS * DEPTH * LANES,), "float32")
        O = T.match_buffer(out, (TILES * STRIPS * LANES,), "float32")
        for tile in T.parallel(STRIPS * TILES):
            acc = T.alloc_local((1,), "float32x16")
            acc[0] = T.Broadcast(T.float32(0), LANES)
            for k in T.serial(DEPTH, annotations=annotations):
                acc[0] = acc[0] + T.Broadcast(X[tile % TILES * DEPTH + k], LANES) * W[
                    T.Ramp(tile // TILES * DEPTH * LANES + k * LANES, 1, LANES)]
            O[T.Ramp(tile * LANES, 1, LANES)] = acc[0]

    return tvm.IRModule({"main": kernel})


# A conv's group of output channels: 2 channel blocks x 8 input channels x 9 taps x 16 lanes,
# read 16 at a time, the second block's read first; each group's 3 rows are its tiles.
GROUPS, ROWS, CHANNELS, TAPS = 5, 3, 8, 9
GROUP = 2 * CHANNELS * TAPS * LANES


def _conv_kernel() -> tvm.IRModule:
    @T.prim_func(s_tir=False)
    def kernel(x: T.handle, w: T.handle, out: T.handle):
        X = T.match_buffer(x, (ROWS * CHANNELS * TAPS,), "float32")
        W = T.match_buffer(w, (GROUPS * GROUP,), "float32")
        O = T.match_buffer(out, (GROUPS * ROWS * 2 * LANES,), "float32")
        for tile in T.parallel(GROUPS * ROWS):
            acc = T.alloc_local((2,), "float32x16")
            acc[0] = T.Broadcast(T.float32(0), LANES)
            acc[1] = T.Broadcast(T.float32(0), LANES)
            group: T.let[T.int32] = tile // ROWS * GROUP
            for c in T.serial(CHANNELS, annotations={PREFETCH_ATTR: [GROUPS, GROUP]}):
                for t in T.serial(TAPS):
                    tap: T.let[T.int32] = group + (c * TAPS + t) * LANES
                    acc[1] = acc[1] + T.Broadcast(X[tile % ROWS * CHANNELS * TAPS + c * TAPS + t], LANES) * W[
                        T.Ramp(tap + GROUP // 2, 1, LANES)]
                    acc[0] = acc[0] + T.Broadcast(X[tile % ROWS * CHANNELS * TAPS + c * TAPS + t], LANES) * W[
                        T.Ramp(tap, 1, LANES)]
            O[T.Ramp(tile * 2 * LANES, 1, LANES)] = acc[0]
            O[T.Ramp(tile * 2 * LANES + LANES, 1, LANES)] = acc[1]

    return tvm.IRModule({"main": kernel})


def _lines_prefetched(kernel: tvm.IRModule, tiles: int, loops: dict[str, int]) -> dict[int, set[int]]:
    """Per strip, the weight lines its tiles prefetch over every step of `loops` (name: extent)."""
    after = PrefetchNextStrip()(kernel)["main"]
    (prefetch,) = [c for c in nodes_of(after.body, tvm.ir.Call) if getattr(c.op, "name", "") == "tirx.prefetch"]
    index = prefetch.args[0].args[0].indices[0]  # address_of(W[index])
    variables = {loop.loop_var.name: loop.loop_var for loop in nodes_of(after.body, tirx.For)}
    lines: dict[int, set[int]] = {}
    parallel = next(loop for loop in nodes_of(after.body, tirx.For) if loop.kind == tirx.ForKind.PARALLEL)
    for tile in range(int(parallel.extent)):
        for step in itertools.product(*(range(extent) for extent in loops.values())):
            analyzer = tvm.sym.Analyzer()
            analyzer.bind(variables["tile"], tile)
            for name, value in zip(loops, step):
                analyzer.bind(variables[name], value)
            lines.setdefault(tile // tiles, set()).add(int(analyzer.simplify(index)) // LINE)
    return lines


@pytest.mark.parametrize("kernel, strips, tiles, loops, strip_elements", [
    (_kernel(marked=True), STRIPS, TILES, {"k": DEPTH}, DEPTH * LANES),
    (_conv_kernel(), GROUPS, ROWS, {"c": CHANNELS, "t": TAPS}, GROUP),
], ids=["dense", "conv"])
def test_the_tiles_of_a_strip_prefetch_every_line_of_the_next_one(kernel, strips, tiles, loops, strip_elements):
    lines = _lines_prefetched(kernel, tiles, loops)
    strip_lines = strip_elements // LINE
    for strip in range(strips - 1):
        assert lines[strip] == set(range((strip + 1) * strip_lines, (strip + 2) * strip_lines))
    assert lines[strips - 1] == {strips * strip_lines - 1}  # the last strip's reach clamped to the end


def test_an_unmarked_loop_stays():
    before = _kernel(marked=False)
    tvm.ir.assert_structural_equal(PrefetchNextStrip()(before), before)
