"""bf16 Winograd convolution (`tvm_fuse.compute.winograd_nchwc_bf16`): the fp32 Winograd
kernel's stages and knobs, its product's step a 16 x 2 (8 x 2) bf16 pair dot product per
output block, tensorized as AVX512-BF16's `vdpbf16ps` (or its portable form, as the
compute's block asks)."""

from __future__ import annotations

from tvm import s_tir

from ..ir_names import DOT_PRODUCT_ATTR
from .common import accumulate_in_registers, parallel_tasks, static_extent, store_tile
from .intrinsics import bf16_dot_product
from .winograd_nchwc import WinogradKnobs, default_knobs, schedule_stages


def schedule(sch: s_tir.Schedule, block, lanes: int, knobs: WinogradKnobs | None = None) -> None:
    schedule_stages(sch, block, lanes, knobs or default_knobs(sch, block, lanes), _product)


def _product(sch: s_tir.Schedule, block, lanes: int, knobs: WinogradKnobs) -> None:
    native = str(sch.get(block).annotations.get(DOT_PRODUCT_ATTR, "vdpbf16ps")) == "vdpbf16ps"
    eps, nu, n, chunk, tiles, lane, ic, pair, member = sch.get_loops(block)
    chunk_out, chunk_in = sch.split(chunk, [None, knobs.channel_tile])
    tiles_out, tiles_in = sch.split(tiles, [None, knobs.tile_rows])
    sch.reorder(eps, nu, chunk_out, n, tiles_out, ic, pair, tiles_in, chunk_in, lane, member)
    parallel_tasks(sch, [eps, nu, chunk_out, n])  # a group's weights read once for the whole batch
    write_back = accumulate_in_registers(sch, block, tiles_out, [chunk_in, tiles_in], None, ic, lanes)
    sch.tensorize(lane, bf16_dot_product(static_extent(sch.get(lane).extent), native))
    store_tile(sch, write_back, None, tiles_out, lanes)  # the epilogue follows the output transform
