"""bf16 dense layers: `x[..., K] @ W[K, N]` with fp32 `x` rounded to bf16 in one pass, and W's bf16
bits packed [N/b, K/2, b, 2] (`compute.bf16.pack_dense_pairs`), summed in fp32: each step a
b x 2 pair dot product, `vdpbf16ps`."""

from __future__ import annotations

from tvm import te

from . import DOT_PRODUCT_ATTR, SCHEDULE_RULE
from .bf16 import PAIR, from_bits, to_bits_tensor

DENSE_BF16_RULE = "tvm_fuse.dense_bf16"


def dense_packed_bf16(x: te.Tensor, packed: te.Tensor, native: bool = True) -> te.Tensor:
    """`native`: tensorized with `vdpbf16ps`, else with its portable form."""
    chunks, pairs, block, pair = packed.shape
    bits = to_bits_tensor(x)
    kp = te.reduce_axis((0, pairs), name="kp")
    p = te.reduce_axis((0, pair), name="p")

    def value(*idx):
        *rows, n = idx
        return te.sum(from_bits(bits[(*rows, kp * PAIR + p)]) * from_bits(packed[n // block, kp, n % block, p]),
                      axis=[kp, p])

    return te.compute((*x.shape[:-1], chunks * block), value, name="matmul",
                      attrs={SCHEDULE_RULE: DENSE_BF16_RULE, DOT_PRODUCT_ATTR: "vdpbf16ps" if native else "portable"})
