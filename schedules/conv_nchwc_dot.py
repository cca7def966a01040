"""The register-tiled NCHW{c}c conv whose step is a dot product over a group of input channels
(int8: 4 u8 x s8 into s32, `conv_nchwc_int8`; bf16: 2 bf16 into fp32, `conv_nchwc_bf16`): the
fp32 kernel's tile of `width_tile` pixels x `channel_tile` output blocks, each step one
tensor intrinsic on a block's accumulator vector, the epilogue applied to the tile."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from tvm import s_tir

from ..compute.conv import STRIDED_INPUT, WIDE_ROW
from .common import (
    accumulate_in_registers,
    accumulator_budget,
    conv_tasks,
    divisor,
    fullest_tile,
    parallel_tasks,
    parallelize_leading,
    rows_outermost,
    splits_channels,
    static_extent,
    store_tile,
    vectorize_innermost,
)
from .conv_nchwc import default_register_tile, register_tiles

_WORD = 4  # bytes of weight per accumulator lane and step: 4 int8 or 2 bf16 values


@dataclass(frozen=True)
class DotProductConvKnobs:
    width_tile: int  # output pixels of a row accumulated together
    channel_tile: int = 1  # output channel blocks accumulated together


def default_knobs(sch: s_tir.Schedule, block, lanes: int) -> DotProductConvKnobs:
    return DotProductConvKnobs(*default_dot_product_tile(sch, block, lanes))


def knob_space(sch: s_tir.Schedule, block, lanes: int) -> list[DotProductConvKnobs]:
    return [DotProductConvKnobs(w, c) for w, c in register_tiles(sch, block, lanes)]


def default_dot_product_tile(sch: s_tir.Schedule, block, lanes: int) -> tuple[int, int]:
    """(width_tile, channel_tile). Measured on ResNet-50's layers, in int8 (AVX-512 VNNI host)
    and in bf16 (AVX512-BF16 host): rows of 28 pixels or more ran fastest in 4 x 4 tiles, as
    the fp32 conv's 7 x 4 tile, its 4 weight vectors and the broadcast input need 33 zmm
    registers, and the spill cost 10-35%; but where those 4 channel blocks' weights pass
    `_TILE_WEIGHT_BYTES` in a conv whose neighbouring tiles share no input rows (1x1 and
    strided convs: the 512-channel 1x1s at 28x28, the stride-2 3x3), in 14 x 2 (ResNet-50 int8
    1.4-1.8% faster, two A/B runs). Rows of 7 in 7 x 4, which spills as well but has no better
    tile; other rows in the fp32 conv's tile. Wide rows whose output channel blocks 4 does not
    divide (MobileNetV2's 24 channels in blocks of 8, 96 in blocks of 16) in the fullest tile
    of up to 3 blocks (8 x 3, 14 x 2): 4 x 1 and 4 x 2 tiles took up to 3x as long there
    (bf16, Zen 5)."""
    loops = sch.get_loops(block)
    chunks, width = (static_extent(sch.get(loops[axis]).extent) for axis in (1, 3))
    if width >= WIDE_ROW and width % 4 == 0:
        if chunks % 4:
            return fullest_tile(width, chunks, accumulator_budget(lanes, 28))
        if width % 14 == 0 and _tile_weight_bytes(sch, block, 4) > _TILE_WEIGHT_BYTES \
                and not _reuses_input_rows(sch, block):
            return 14, 2
        return 4, 4
    if 0 < width <= 7:
        return width, divisor(chunks, (4, 2, 1))
    return default_register_tile(sch, block, lanes)


_TILE_WEIGHT_BYTES = 16 * 1024


def _tile_weight_bytes(sch: s_tir.Schedule, block, channel_tile: int) -> int:
    """Bytes of weights a tile of `channel_tile` output blocks reads: per block, its lanes x
    one word for each input word and tap."""
    *_, lane, ic, ky, kx, group, _member = sch.get_loops(block)
    reduction = [static_extent(sch.get(loop).extent) for loop in (lane, ic, ky, kx, group)]
    return channel_tile * math.prod(reduction) * _WORD


def _reuses_input_rows(sch: s_tir.Schedule, block) -> bool:
    """Whether the conv has taps over a stride-1 input (a 3x3 stride-1 conv, not a 1x1 or a
    strided one): its input width (padded) is under twice its output's."""
    loops = sch.get_loops(block)
    taps = [static_extent(sch.get(loops[axis]).extent) for axis in (6, 7)]
    data = sch.get(block).reads[0].source
    return taps != [1, 1] and int(data.shape[3]) < 2 * static_extent(sch.get(loops[3]).extent)


def schedule_dot_product_conv(sch: s_tir.Schedule, block, lanes: int, knobs: DotProductConvKnobs | None,
                              intrinsic: Callable[[int], str]) -> None:
    """`intrinsic(lanes)`: the tensor intrinsic's name for an output block of `lanes` accumulators."""
    knobs = knobs or default_knobs(sch, block, lanes)
    width_tile, channel_tile = knobs.width_tile, knobs.channel_tile
    epilogue = inline_elementwise(sch, block)
    split_channels = splits_channels(sch, block)
    if split_channels:  # a pass of gathered pixels paid only where tasks split rows
        for producer in sch.get_producers(block):
            if sch.get(producer).name_hint == STRIDED_INPUT:
                sch.compute_inline(producer)
    input_pass(sch, block, lanes, rows_first=not split_channels)
    n, chunk, y, x, lane, ic, ky, kx, group, member = sch.get_loops(block)
    chunk_out, chunk_in = sch.split(chunk, [None, channel_tile])
    x_out, x_in = sch.split(x, [None, width_tile])
    tasks = conv_tasks(split_channels, n, chunk_out, [y])
    sch.reorder(*tasks, x_out, ic, ky, kx, group, x_in, chunk_in, lane, member)
    parallel_tasks(sch, tasks)
    write_back = accumulate_in_registers(sch, block, x_out, [chunk_in, x_in], None, ic, lanes)
    sch.tensorize(lane, intrinsic(static_extent(sch.get(lane).extent)))
    store_tile(sch, write_back, epilogue, x_out, lanes, unroll=True)


def inline_elementwise(sch: s_tir.Schedule, anchor):
    """Inline every elementwise stage into the last one, which writes the output, and return
    it (None if the anchor writes it): the epilogue after the anchor, and before it what the
    anchor's direct producers (its padded input) read: the dequantization of a u8 residual,
    the rounding of fp32 data to bf16 (inlined into the padding), a batch norm + ReLU before
    the conv (`transform.realize_bf16`'s prologue)."""
    kept = {sch.get(b).name_hint for b in [anchor, *sch.get_producers(anchor)]}
    blocks = list(sch.get_child_blocks(sch.get_sblock("root")))
    names = [sch.get(b).name_hint for b in blocks[:-1]]  # blocks change as stages are inlined; names stay
    for name in names:
        if name not in kept:
            sch.compute_inline(sch.get_sblock(name))
    return None if sch.get(blocks[-1]).name_hint == sch.get(anchor).name_hint else blocks[-1]


def input_pass(sch: s_tir.Schedule, anchor, lanes: int, rows_first: bool = False) -> None:
    """The anchor's direct producers (its padded input, rounded to bf16 or normalized as it is
    read) as passes of their own: parallel over their outer loops (batch and channel blocks,
    and rows where those are few: an image's one block; `rows_first`: batch and rows, the
    split of a conv whose tasks split the image), vectorized inside."""
    for producer in sch.get_producers(anchor):
        loops = sch.get_loops(producer)
        if rows_first and len(loops) == 5:  # [batch, channel blocks, rows, columns, block]
            loops = rows_outermost(sch, producer)
        parallelize_leading(sch, loops[:-1])
        vectorize_innermost(sch, producer, lanes)
