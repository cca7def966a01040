"""What the int8 and bf16 realizations read of a fused composite (a function of the fusion
table, `patterns.table`): its anchor and where the anchor's data and weight come in, whether it
is a depthwise conv, how a conv's weight is laid out for AMX tiles, and which outputs may stay
narrow between kernels."""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass

import numpy as np
from tvm import relax

from ...amx import amx_conv_layout
from ...compute.conv import fold_weight_taps, is_depthwise, merge_input_blocks


@dataclass(frozen=True)
class Anchor:
    """A composite's first op, the one its kernel is built around (a conv, a product), and the
    positions of the composite's parameters that are its data and its weight (None for an
    operand that is not a parameter)."""
    call: relax.Call
    data: int | None
    weight: int | None

    @property
    def op(self) -> str:
        return self.call.op.name

    def is_depthwise_conv(self) -> bool:
        return self.op == "relax.nn.conv2d" and is_depthwise(self.call.attrs.groups, self.call.args[1].ty.shape)


def anchor_of(func: relax.Function) -> Anchor:
    call = func.body.blocks[0].bindings[0].value
    data, weight = (next((i for i, p in enumerate(func.params) if p.same_as(operand)), None)
                    for operand in call.args[:2])
    return Anchor(call, data, weight)


@dataclass(frozen=True)
class TileLayout:
    """How a blocked conv's input and weight meet AMX tiles (`amx.amx_conv_layout`): `fold`, its
    row of kernel taps folded into its one input block (`conv.fold_row_taps`); else `group`
    neighbouring input blocks per tile row (1: as the vector kernels take them)."""
    fold: bool = False
    group: int = 1

    def arrange(self, weight: np.ndarray) -> np.ndarray:
        """A blocked conv weight (or its codes) arranged for this layout, before packing."""
        return fold_weight_taps(weight) if self.fold else merge_input_blocks(weight, self.group)


def conv_tile_layout(anchor: Anchor, in_block: int, element_bytes: int, in_chunks: int, weight_type,
                     amx: bool) -> TileLayout | None:
    """The tile layout of the blocked conv `anchor`, whose input comes in `in_chunks` blocks of
    `in_block` values of `element_bytes` and whose weight has `weight_type`; None without `amx`,
    or where its shape does not fit the tiles."""
    found = amx_conv_layout(in_block, element_bytes, in_chunks, int(weight_type.shape[3]), int(weight_type.shape[5]),
                            int(anchor.call.ty.shape[3])) if amx else None
    return TileLayout(*found) if found else None


def largest_set(candidates: Collection, keeps: Callable[[object, set], bool]) -> set:
    """The largest subset S of `candidates` in which `keeps(member, S)` holds for every member:
    which outputs stay narrow, where a member's readers must take it narrow and a reader that
    passes a narrow tensor on (a concat, a max-pool) does so only while it is in S itself.
    Members that fail are dropped until none does (each drop may fail the members it kept)."""
    kept = set(candidates)
    while True:
        still = {member for member in kept if keeps(member, kept)}
        if still == kept:
            return kept
        kept = still
