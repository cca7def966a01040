"""Tensor-expression compute definitions of our kernels, kept apart from their schedules.

Each anchor compute (convolution, dense, batched matmul) tags its reduction block with a
`schedule_rule` attribute naming the schedule in `tvm_fuse.schedules` that knows its loop nest;
`epilogue` turns the post-ops of a fused pattern into elementwise stages the schedule inlines
into the anchor's output loop.
"""

