"""Fused attention (`tvm_fuse.compute.attention`): (sequence, head) pairs in parallel; in
each, its keys transposed once, then query rows a block (`row_tile`) at a time: the block's
scores accumulated in registers (`row_tile` rows x `key_vectors` vectors of keys over the
head's depth) and masked as they are stored, their softmax a vector at a time, and the
context accumulated in registers (rows x the depth's vectors over the keys), then stored
scaled by each row's inverse sum. Its bf16 form (`schedule_bf16`) tiles both products the same
way, each step a bf16 pair dot product (`vdpbf16ps`) on a vector of accumulators; Q rounded,
and the keys and values rounded and paired, once per task."""

from __future__ import annotations

from dataclasses import dataclass

from tvm import s_tir

from ..compute.matmul import ROW_MULTIPLE
from ..ir_names import DOT_PRODUCT_ATTR
from .common import (
    accumulate_in_registers,
    accumulator_budget,
    divides,
    divisor,
    static_extent,
    store_tile,
    vectorize_innermost,
)
from .intrinsics import bf16_dot_product


@dataclass(frozen=True)
class AttentionKnobs:
    row_tile: int  # query rows per block
    key_vectors: int = 1  # key vectors per score tile


def _shape(sch: s_tir.Schedule, blocks: dict) -> tuple:
    """(query rows computed, key columns computed, head depth), from the stages' buffers."""
    *_, rows, columns = sch.get(blocks["scores"]).writes[0].source.shape
    heads = sch.get(blocks["keys_t"]).writes[0].source.shape[1]
    width = sch.get(blocks["attention"]).writes[0].source.shape[-1]
    return rows, columns, int(width) // int(heads)


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


def knob_space_bf16(sch: s_tir.Schedule, block, lanes: int) -> list[AttentionKnobs]:
    """`knob_space`, for a symbolic token count only row blocks of whole padded rows: in a
    smaller one TVM cannot match the rounded operands' regions to the dot product's."""
    rows = _shape(sch, _blocks(sch))[0]
    return [k for k in knob_space(sch, block, lanes) if static_extent(rows) or k.row_tile % ROW_MULTIPLE == 0]


def schedule(sch: s_tir.Schedule, block, lanes: int, knobs: AttentionKnobs | None = None) -> None:
    blocks, block_rows, task, knobs = _schedule_softmax(sch, lanes, knobs)
    sch.compute_at(blocks["keys_t"], task)
    depth_loop, key_loop = sch.get_loops(blocks["keys_t"])[-2:]
    sch.reorder(key_loop, depth_loop)  # read each key's row in order (written as columns)

    context = blocks["context"]
    row, channel, keys = sch.get_loops(context)[-3:]
    depth = _depth(sch, blocks)
    width = divisor(depth, [lanes >> s for s in range(lanes.bit_length())])
    chunks, vector, lane = _context_tile(sch, channel, width, knobs, lanes, depth)
    sch.reorder(chunks, keys, row, vector, lane)
    write_back = accumulate_in_registers(sch, context, chunks, [row, vector], lane if width > 1 else None, keys, lanes)
    vectorize_innermost(sch, write_back, lanes)

    scores = blocks["scores"]
    row, column, reduction = sch.get_loops(scores)[-3:]
    columns_out, column_vectors, column_lane = sch.split(column, [None, knobs.key_vectors, lanes])
    sch.reorder(columns_out, reduction, row, column_vectors, column_lane)
    write_back = accumulate_in_registers(sch, scores, columns_out, [row, column_vectors], column_lane, reduction, lanes)
    store_tile(sch, write_back, blocks["logits"], columns_out, lanes)  # masked as it is stored


def schedule_bf16(sch: s_tir.Schedule, block, lanes: int, knobs: AttentionKnobs | None = None) -> None:
    """The bf16 products' form (`compute.attention` with `bf16`); the depth a multiple of `lanes`."""
    native = str(sch.get(block).annotations.get(DOT_PRODUCT_ATTR, "vdpbf16ps")) == "vdpbf16ps"
    intrinsic = bf16_dot_product(lanes, native)
    blocks, block_rows, task, knobs = _schedule_softmax(sch, lanes, knobs, ("query_bf16", "exps_bf16"))
    for name in ("keys_t", "values_t", "query_bf16"):  # rounded (and paired) once per task
        sch.compute_at(blocks[name], task)
    for name in ("keys_t", "values_t", "query_bf16", "exps_bf16"):
        vectorize_innermost(sch, blocks[name], lanes)

    context = blocks["context"]
    row, channel, pairs, pair = sch.get_loops(context)[-4:]
    chunks, vector, lane = _context_tile(sch, channel, lanes, knobs, lanes, _depth(sch, blocks))
    sch.reorder(chunks, pairs, row, vector, lane, pair)
    write_back = accumulate_in_registers(sch, context, chunks, [row, vector], None, pairs, lanes)
    sch.tensorize(lane, intrinsic)
    vectorize_innermost(sch, write_back, lanes)

    scores = blocks["scores"]
    row, column, pairs, pair = sch.get_loops(scores)[-4:]
    columns_out, column_vectors, column_lane = sch.split(column, [None, knobs.key_vectors, lanes])
    sch.reorder(columns_out, pairs, row, column_vectors, column_lane, pair)
    write_back = accumulate_in_registers(sch, scores, columns_out, [row, column_vectors], None, pairs, lanes)
    sch.tensorize(column_lane, intrinsic)
    store_tile(sch, write_back, blocks["logits"], columns_out, lanes)


def _depth(sch: s_tir.Schedule, blocks: dict) -> int:
    return _shape(sch, blocks)[2]


def _context_tile(sch: s_tir.Schedule, channel, width: int, knobs: AttentionKnobs, lanes: int, depth: int):
    """The context's channels of a head split in (chunks, vectors, lanes of `width`): as many
    vectors per chunk as the accumulator budget holds for the row block."""
    chunk = divisor(depth // width, range(max(1, accumulator_budget(lanes, 24) // knobs.row_tile), 0, -1))
    return sch.split(channel, [None, chunk, width])


def _schedule_softmax(sch: s_tir.Schedule, lanes: int, knobs: AttentionKnobs | None, staged: tuple = ()):
    """What both forms share: the output's loops, (batch, head) tasks in parallel and row
    blocks in turn; each row block's stages (`staged` too) computed in it, the softmax's
    partial reductions and exponentials vectorized. Return (blocks, the row block loop, the
    task loop, knobs)."""
    knobs = knobs or default_knobs(sch, None, lanes)
    blocks = _blocks(sch)
    kept = ("keys_t", "values_t", "scores", "logits", "partial_max", "row_max", "exps", "partial_sum", "row_sum",
            "inverse_sum", "context", "attention", *staged)
    for name, stage in blocks.items():  # the shift and exp, into the exponentials' block
        if name not in kept:
            sch.compute_inline(stage)

    # The output, [batch, rows, heads * depth]: (batch, head) in parallel, row blocks in turn.
    output = blocks["attention"]
    batch, rows, channels = sch.get_loops(output)
    head, channel = sch.split(channels, [None, _depth(sch, blocks)])
    block_rows, row = sch.split(rows, [None, knobs.row_tile])
    sch.reorder(batch, head, block_rows, row, channel)
    task = sch.fuse(batch, head)
    sch.parallel(task)
    vectorize_innermost(sch, output, lanes)
    order = ("inverse_sum", "context", "exps_bf16", "row_sum", "partial_sum", "exps", "row_max", "partial_max",
             "logits", "scores")
    for name in order:  # each before its reader, inside the row block
        if name in blocks:
            sch.compute_at(blocks[name], block_rows)
    for name in ("partial_max", "partial_sum"):  # a vector of partial results over the row's vectors
        lane, group = sch.get_loops(blocks[name])[-2:]
        sch.reorder(group, lane)
        sch.vectorize(lane)
        init = sch.decompose_reduction(blocks[name], group)
        sch.vectorize(sch.get_loops(init)[-1])
    vectorize_innermost(sch, blocks["exps"], lanes)
    return blocks, block_rows, task, knobs
