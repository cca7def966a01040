"""The register-tiled NCHW{c}c conv whose step is a dot product over a group of input channels
(int8: 4 u8 x s8 into s32, `conv_nchwc_int8`; bf16: 2 bf16 into fp32, `conv_nchwc_bf16`): the
fp32 kernel's tile of `width_tile` pixels x `channel_tile` output blocks, each step one
tensor intrinsic on a block's accumulator vector, the epilogue applied to the tile."""

from __future__ import annotations

from collections.abc import Callable

from tvm import s_tir

from .common import accumulate_in_registers, static_extent, store_tile


def schedule_dot_product_conv(sch: s_tir.Schedule, block, width_tile: int, channel_tile: int,
                              intrinsic: Callable[[int], str], lanes: int) -> None:
    """`intrinsic(lanes)`: the tensor intrinsic's name for an output block of `lanes` accumulators."""
    epilogue = _inline_elementwise(sch, block)
    for producer in sch.get_producers(block):
        sch.parallel(sch.fuse(*sch.get_loops(producer)[:2]))
    n, chunk, y, x, lane, ic, ky, kx, group, member = sch.get_loops(block)
    chunk_out, chunk_in = sch.split(chunk, [None, channel_tile])
    x_out, x_in = sch.split(x, [None, width_tile])
    sch.reorder(n, chunk_out, y, x_out, ic, ky, kx, group, x_in, chunk_in, lane, member)
    sch.parallel(sch.fuse(n, chunk_out, y))
    write_back = accumulate_in_registers(sch, block, x_out, [chunk_in, x_in], None, ic, lanes)
    sch.tensorize(lane, intrinsic(static_extent(sch.get(lane).extent)))
    store_tile(sch, write_back, epilogue, x_out, lanes, unroll=True)


def _inline_elementwise(sch: s_tir.Schedule, anchor):
    """Inline every elementwise stage into the last one, which writes the output, and return
    it (None if the anchor writes it): the epilogue after the anchor, and before it what the
    anchor's direct producers (its padded input) read: the dequantization of a u8 residual,
    the rounding of fp32 data to bf16 (inlined into the padding)."""
    kept = {sch.get(b).name_hint for b in [anchor, *sch.get_producers(anchor)]}
    blocks = list(sch.get_child_blocks(sch.get_sblock("root")))
    if sch.get(blocks[-1]).name_hint == sch.get(anchor).name_hint:
        return None
    names = [sch.get(b).name_hint for b in blocks[:-1]]  # blocks change as stages are inlined; names stay
    for name in names:
        if name not in kept:
            sch.compute_inline(sch.get_sblock(name))
    return blocks[-1]
