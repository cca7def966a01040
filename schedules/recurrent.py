"""An LSTM direction's recurrence (`tvm_fuse.compute.recurrent`) on one thread: each step's
product with R a register tile of `column_tile` vectors of gate columns at a time over the
hidden state, its gates inlined into the cell and hidden state's vector loops, and the output
sequence written by an unrolled loop over time. A step is a few thousand multiply-adds: on
two threads, each step would wait for a join."""

from __future__ import annotations

from dataclasses import dataclass

from tvm import s_tir

from ..compute import SCHEDULE_RULE
from .common import accumulate_in_registers, accumulator_tile, divisor, divisors, vectorize_innermost


@dataclass(frozen=True)
class LstmKnobs:
    column_tile: int  # vectors of gate columns accumulated together


def _vector(sch: s_tir.Schedule, block, lanes: int) -> tuple[int, int]:
    """(columns per vector: the widest of lanes, lanes/2, ... that divides the gate columns,
    vectors of gate columns)."""
    _, columns, _ = (int(sch.get(loop).extent) for loop in sch.get_loops(block))
    width = divisor(columns, [lanes >> s for s in range(lanes.bit_length())])
    return width, columns // width


def default_knobs(sch: s_tir.Schedule, block, lanes: int) -> LstmKnobs:
    return LstmKnobs(accumulator_tile(_vector(sch, block, lanes)[1], 1, lanes))


def knob_space(sch: s_tir.Schedule, block, lanes: int) -> list[LstmKnobs]:
    return [LstmKnobs(c) for c in divisors(_vector(sch, block, lanes)[1], 8)]


def schedule(sch: s_tir.Schedule, block, lanes: int, knobs: LstmKnobs | None = None) -> None:
    knobs = knobs or default_knobs(sch, block, lanes)
    steps, states = [], []
    for b in sch.get_child_blocks(sch.get_sblock("root")):
        name = sch.get(b).name_hint
        if sch.get(b).annotations.get(SCHEDULE_RULE) is not None:
            steps.append(b)
        elif name[0] in "ch" and name[1:].isdigit():
            states.append(b)
        elif name != "y":
            sch.compute_inline(b)  # the gates and activations, into the states that read them
    width, vectors = _vector(sch, steps[0], lanes)
    if vectors % knobs.column_tile:
        raise ValueError(f"{knobs.column_tile} does not divide the {vectors} vectors of gate columns")
    for step in steps:
        rows, columns, reduction = sch.get_loops(step)
        tiles, column_blocks, lane = sch.split(columns, [None, knobs.column_tile, width])
        sch.reorder(rows, tiles, reduction, column_blocks, lane)
        write_back = accumulate_in_registers(sch, step, tiles, [column_blocks], lane, reduction, lanes)
        vectorize_innermost(sch, write_back, lanes)
    for state in (*states, sch.get_sblock("y")):
        vectorize_innermost(sch, state, lanes)
    time, *_ = sch.get_loops(sch.get_sblock("y"))
    sch.unroll(time)
