"""PrefetchNextStrip: in a reduction loop the schedule marked, each tile of a strip
prefetches its share of the next strip's weights, a line a step, and together the tiles of a
strip fetch every line of the next one, never past the weight's end; an unmarked loop stays."""

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


def test_the_tiles_of_a_strip_prefetch_every_line_of_the_next_one():
    after = PrefetchNextStrip()(_kernel(marked=True))["main"]
    (prefetch,) = [c for c in nodes_of(after.body, tvm.ir.Call) if getattr(c.op, "name", "") == "tirx.prefetch"]
    index = prefetch.args[0].args[0].indices[0]  # address_of(W[index])
    tile, step = sorted((loop.loop_var for loop in nodes_of(after.body, tirx.For)), key=lambda v: v.name != "tile")
    lines: dict[int, list[int]] = {}
    for t in range(STRIPS * TILES):
        for k in range(DEPTH):
            analyzer = tvm.sym.Analyzer()
            analyzer.bind(tile, t)
            analyzer.bind(step, k)
            lines.setdefault(t // TILES, []).append(int(analyzer.simplify(index)) // LINE)
    strip_lines = DEPTH * LANES // LINE
    for strip in range(STRIPS - 1):
        assert sorted(set(lines[strip])) == list(range((strip + 1) * strip_lines, (strip + 2) * strip_lines))
    assert set(lines[STRIPS - 1]) == {STRIPS * strip_lines - 1}  # the last strip's reach clamped to the end


def test_an_unmarked_loop_stays():
    before = _kernel(marked=False)
    tvm.ir.assert_structural_equal(PrefetchNextStrip()(before), before)
