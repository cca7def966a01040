"""Winograd convolution (`tvm_fuse.compute.winograd_nchwc`), stage by stage: the input
transform one tile and channel block at a time, rows into registers then columns, with the
tile positions unrolled (so only the nonzero terms remain) over a vector of channels; the product as in the direct conv, a tile of
`tile_rows` tiles x `channel_tile` output channel blocks accumulated in registers over the
input channels; the output transform like the input's; the gather into NCHW{c}c with the
fused epilogue last."""

from __future__ import annotations

from dataclasses import dataclass

from tvm import s_tir

from .common import (
    accumulate_in_registers,
    accumulator_budget,
    divisor,
    divisors,
    fullest_tile,
    parallel_tasks,
    prefetch_next_channels,
    store_tile,
    vectorize_innermost,
)


@dataclass(frozen=True)
class WinogradKnobs:
    tile_rows: int  # tiles accumulated together in the product
    channel_tile: int  # output channel blocks accumulated together in the product


def default_knobs(sch: s_tir.Schedule, block, lanes: int) -> WinogradKnobs:
    _, _, _, chunks, tiles, *_ = (sch.get(loop).extent for loop in sch.get_loops(block))
    if lanes < 16:
        return WinogradKnobs(*fullest_tile(tiles, chunks, accumulator_budget(lanes, 28)))
    channel_tile = divisor(chunks, (2, 1))
    return WinogradKnobs(divisor(tiles, range(min(14, 28 // channel_tile), 0, -1)), channel_tile)


def knob_space(sch: s_tir.Schedule, block, lanes: int) -> list[WinogradKnobs]:
    _, _, _, chunks, tiles, *_ = (sch.get(loop).extent for loop in sch.get_loops(block))
    budget = accumulator_budget(lanes, 28)
    return [WinogradKnobs(t, c) for c in divisors(chunks, 4) for t in divisors(tiles, 16) if t * c <= budget]


def schedule(sch: s_tir.Schedule, block, lanes: int, knobs: WinogradKnobs | None = None) -> None:
    schedule_stages(sch, block, lanes, knobs or default_knobs(sch, block, lanes), _product)


def schedule_stages(sch: s_tir.Schedule, block, lanes: int, knobs: WinogradKnobs, product) -> None:
    """Every stage but the product, which `product(sch, block, lanes, knobs)` schedules."""
    blocks = list(sch.get_child_blocks(sch.get_sblock("root")))
    position = next(i for i, b in enumerate(blocks) if sch.get(b).same_as(sch.get(block)))
    *before, pad, input_rows, transformed_input = blocks[:position]
    output_rows, transformed_output, *after = blocks[position + 1:]
    # Elementwise stages: the gather and the epilogue's; before the pad, a bf16 operand's
    # widening and a bf16 conv's prologue (`transform.realize_bf16`).
    for stage in [*before, *after[:-1]]:
        sch.compute_inline(stage)
    sch.parallel(sch.fuse(*sch.get_loops(pad)[:2]))
    eps, nu, n, chunk, tiles, lane = sch.get_loops(transformed_input)
    sch.reorder(n, chunk, tiles, eps, nu, lane)
    sch.parallel(sch.fuse(n, chunk))
    _transform(sch, transformed_input, input_rows, tiles, eps, nu, lane)
    product(sch, block, lanes, knobs)
    n, chunk, tiles_h, tiles_w, vh, vw, lane = sch.get_loops(transformed_output)
    sch.parallel(sch.fuse(n, chunk, tiles_h))
    _transform(sch, transformed_output, output_rows, tiles_w, vh, vw, lane)
    output = after[-1]
    sch.parallel(sch.fuse(*sch.get_loops(output)[:3]))
    vectorize_innermost(sch, output, lanes)


def _transform(sch: s_tir.Schedule, columns, rows, tile_loop, first, second, lane) -> None:
    """One tile's transform: its rows stage computed into registers under `tile_loop`, then
    its columns; both with the tile positions unrolled over a vector of channels."""
    sch.compute_at(rows, tile_loop)
    sch.set_scope(rows, 0, "local")
    *_, row_first, row_second, row_lane = sch.get_loops(rows)
    for loop in (row_first, row_second, first, second):
        sch.unroll(loop)
    sch.vectorize(row_lane)
    sch.vectorize(lane)


def _product(sch: s_tir.Schedule, block, lanes: int, knobs: WinogradKnobs) -> None:
    eps, nu, n, chunk, tiles, lane, ic, ib = sch.get_loops(block)
    chunk_out, chunk_in = sch.split(chunk, [None, knobs.channel_tile])
    tiles_out, tiles_in = sch.split(tiles, [None, knobs.tile_rows])
    sch.reorder(eps, nu, chunk_out, n, tiles_out, ic, ib, tiles_in, chunk_in, lane)
    prefetch_next_channels(sch, block, ic, [eps, nu, chunk_out], [n, tiles_out], knobs.channel_tile, chunk_axis=2)
    tiles = parallel_tasks(sch, [eps, nu, chunk_out, n, tiles_out])
    write_back = accumulate_in_registers(sch, block, tiles, [chunk_in, tiles_in], lane, ic, lanes)
    store_tile(sch, write_back, None, tiles, lanes)  # the epilogue follows the output transform
