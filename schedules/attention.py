"""Fused attention (`tvm_fuse.compute.attention`): (sequence, head) pairs in parallel; in
each, its keys transposed once, then query rows a block (`row_tile`) at a time: the block's
scores accumulated in registers (`row_tile` rows x `key_vectors` vectors of keys over the
head's depth) and masked as they are stored, their softmax a vector at a time, and the
context accumulated in registers (rows x the depth's vectors over the keys), then stored
scaled by each row's inverse sum."""

from __future__ import annotations

from dataclasses import dataclass

from tvm import s_tir

from .common import accumulate_in_registers, accumulator_budget, divides, divisor, static_extent, \
    store_tile, vectorize_innermost


@dataclass(frozen=True)
class AttentionKnobs:
    row_tile: int  # query rows per block
    key_vectors: int = 1  # key vectors per score tile


def _shape(sch: s_tir.Schedule, blocks: dict) -> tuple:
    """(query rows computed, key columns computed, head depth), from the scores' loops."""
    *_, rows, columns, depth = (sch.get(loop).extent for loop in sch.get_loops(blocks["scores"]))
    return rows, columns, depth


def _blocks(sch: s_tir.Schedule) -> dict:
    return {sch.get(b).name_hint: b for b in sch.get_child_blocks(sch.get_sblock("root"))}


def default_knobs(sch: s_tir.Schedule, block, lanes: int) -> AttentionKnobs:
    rows, columns, _ = _shape(sch, _blocks(sch))
    row_tile = divisor(rows, [8, 4, 2])  # rows are computed padded to 8
    return AttentionKnobs(row_tile, 2 if lanes >= 16 and divides(2 * lanes, columns) else 1)


def knob_space(sch: s_tir.Schedule, block, lanes: int) -> list[AttentionKnobs]:
    rows, columns, _ = _shape(sch, _blocks(sch))
    budget = accumulator_budget(lanes, 24)
    return [AttentionKnobs(r, v) for r in (2, 4, 8, 16) if divides(r, rows)
            for v in (1, 2, 3, 4) if divides(v * lanes, columns) and r * v <= budget]


def schedule(sch: s_tir.Schedule, block, lanes: int, knobs: AttentionKnobs | None = None) -> None:
    knobs = knobs or default_knobs(sch, block, lanes)
    blocks = _blocks(sch)
    kept = ("keys_t", "scores", "logits", "partial_max", "row_max", "exps", "partial_sum", "row_sum", "inverse_sum",
            "context", "attention")
    for name, stage in blocks.items():  # the shift and exp, into the exponentials' block
        if name not in kept:
            sch.compute_inline(stage)
    _, _, depth = _shape(sch, blocks)
    depth = static_extent(depth)

    # The output, [batch, rows, heads * depth]: (batch, head) in parallel, row blocks in turn.
    output = blocks["attention"]
    batch, rows, channels = sch.get_loops(output)
    head, channel = sch.split(channels, [None, depth])
    block_rows, row = sch.split(rows, [None, knobs.row_tile])
    sch.reorder(batch, head, block_rows, row, channel)
    task = sch.fuse(batch, head)
    sch.parallel(task)
    vectorize_innermost(sch, output, lanes)
    for name in ("inverse_sum", "context", "row_sum", "partial_sum", "exps", "row_max", "partial_max", "logits",
                 "scores"):  # each before its reader, inside the row block
        sch.compute_at(blocks[name], block_rows)
    sch.compute_at(blocks["keys_t"], task)
    depth_loop, key_loop = sch.get_loops(blocks["keys_t"])[-2:]
    sch.reorder(key_loop, depth_loop)  # read each key's row in order (written as columns)

    context = blocks["context"]
    row, channel, keys = sch.get_loops(context)[-3:]
    width = divisor(depth, [lanes >> s for s in range(lanes.bit_length())])
    chunk = divisor(depth // width, range(max(1, accumulator_budget(lanes, 24) // knobs.row_tile), 0, -1))
    chunks, vector, lane = sch.split(channel, [None, chunk, width])
    sch.reorder(chunks, keys, row, vector, lane)
    write_back = accumulate_in_registers(sch, context, chunks, [row, vector], lane if width > 1 else None, keys, lanes)
    vectorize_innermost(sch, write_back, lanes)

    scores = blocks["scores"]
    row, column, reduction = sch.get_loops(scores)[-3:]
    columns_out, column_vectors, column_lane = sch.split(column, [None, knobs.key_vectors, lanes])
    sch.reorder(columns_out, reduction, row, column_vectors, column_lane)
    write_back = accumulate_in_registers(sch, scores, columns_out, [row, column_vectors], column_lane, reduction, lanes)
    store_tile(sch, write_back, blocks["logits"], columns_out, lanes)  # masked as it is stored
    for name in ("partial_max", "partial_sum"):  # a vector of partial results over the row's vectors
        lane, group = sch.get_loops(blocks[name])[-2:]
        sch.reorder(group, lane)
        sch.vectorize(lane)
        init = sch.decompose_reduction(blocks[name], group)
        sch.vectorize(sch.get_loops(init)[-1])
    vectorize_innermost(sch, blocks["exps"], lanes)
