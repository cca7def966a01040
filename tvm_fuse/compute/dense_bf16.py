"""bf16 dense layers: `x[..., K] @ W[K, N]` with fp32 `x` rounded to bf16 in one pass, and W's bf16
bits packed [N/b, K/2, b, 2] (`compute.bf16.pack_dense_pairs`), summed in fp32: each step a
b x 2 pair dot product, `vdpbf16ps`; or, on AMX, the same sum in tiles (`schedules.amx.dense`),
for which the [N/16, K/2, 16, 2] pack is the layout of the matrix engine's B tiles."""

from __future__ import annotations

from tvm import te

from ..ir_names import DENSE_AMX_RULE, DENSE_BF16_RULE, DOT_PRODUCT_ATTR, SCHEDULE_RULE
from .bf16 import PAIR, from_bits, to_bits_tensor
from .matmul import dense_product


def dense_packed_bf16(x: te.Tensor, packed: te.Tensor, native: bool = True, amx: bool = False) -> te.Tensor:
    """`native`: tensorized with `vdpbf16ps`, else with its portable form. `amx`: computed on
    AMX tiles (`tdpbf16ps`) instead, where the shape `amx.fits_amx`."""
    chunks, pairs, block, pair = packed.shape
    bits = to_bits_tensor(x)
    kp = te.reduce_axis((0, pairs), name="kp")
    p = te.reduce_axis((0, pair), name="p")

    def value(rows, n):
        return te.sum(from_bits(bits[(*rows, kp * PAIR + p)]) * from_bits(packed[n // block, kp, n % block, p]),
                      axis=[kp, p])

    attrs = {SCHEDULE_RULE: DENSE_AMX_RULE} if amx else \
        {SCHEDULE_RULE: DENSE_BF16_RULE, DOT_PRODUCT_ATTR: "vdpbf16ps" if native else "portable"}
    return dense_product(bits, chunks * block, value, attrs, pad=not amx)
