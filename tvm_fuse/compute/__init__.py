"""Tensor-expression compute definitions of our kernels, kept apart from their schedules.

Each anchor compute (convolution, dense, batched matmul) tags its reduction block with a
`schedule_rule` attribute naming the schedule in `tvm_fuse.schedules` that knows its loop nest;
`epilogue` turns the post-ops of a fused pattern into elementwise stages the schedule inlines
into the anchor's output loop.
"""

SCHEDULE_RULE = "schedule_rule"  # block attribute read by `tvm_fuse.schedules.apply`
DOT_PRODUCT_ATTR = "tvm_fuse.dot_product"  # block attribute: the instruction a dot-product kernel is tensorized with
DENSE_AMX_RULE = "tvm_fuse.dense_amx"  # a bf16 or u8 x s8 dense product on AMX tiles (`schedules.dense_amx`)
AMX_COLUMNS = 16  # C columns per AMX tile: a dense weight's packing block must be this
AMX_ROW_BYTES = 64  # bytes of K per AMX tile row: K times the input's bytes must be a multiple


def fits_amx(k: int, element_bytes: int, block: int) -> bool:
    """Whether a dense product over a reduction of `k` inputs of `element_bytes` each, its
    weight packed in blocks of `block` columns, fits AMX tiles: blocks of a tile's 16 columns,
    and K in whole 64-byte tile rows (32 bf16, 64 int8)."""
    return block == AMX_COLUMNS and k * element_bytes % AMX_ROW_BYTES == 0
