"""The names our IR carries from one layer to another, each defined once: attributes that the
importer, the passes, the compute definitions and the schedules write and read, TVM's op-pattern
kind of our kernels, and the schedule rules a kernel's anchor block names (the keys of
`tvm_fuse.schedules.RULES`); and the alignment TVM's kernels assume of every tensor."""

# Bytes: TVM allocates every tensor's data so aligned, and its kernels assume it of their arguments.
TVM_ALIGNMENT = 64

# -- Relax composite functions (the fusion table's matches) ----------------------------------
PATTERN_ATTR = "tvm_fuse.pattern"  # the chain that matched, e.g. conv2d+bias+relu
ANCHOR_ATTR = "tvm_fuse.anchor"  # the anchor's family, conv or fc
NODES_ATTR = "tvm_fuse.onnx_nodes"  # its ONNX nodes, e.g. "3,4,5"

# -- Relax functions of an ONNX If -------------------------------------------------------------
BRANCH_ATTR = "tvm_fuse.branch"  # on a function that is an If's branch: the If node's name
UNBUILT_ATTR = "tvm_fuse.unbuilt"  # on a branch that raises when taken: why it could not be built
UNBUILT_NODES_ATTR = "tvm_fuse.unbuilt_nodes"  # ... and the numbers of its ONNX nodes, [first, end)

# -- TIR kernels ---------------------------------------------------------------------------------
OP_PATTERN_ATTR = "op_pattern"  # TVM's: how its generic fusion may combine the kernel
OPAQUE = 8  # Relax's OpPatternKind kOpaque: our kernels, which TVM's fusion leaves alone
KERNEL_ATTR = "tvm_fuse.kernel"  # which of our kernels a PrimFunc is
REVERSE_ATTR = "tvm_fuse.reverse"  # on a recurrence kernel: 1 for each direction that runs from the last step
CONCAT_AXIS_ATTR = "tvm_fuse.concat_axis"  # a plain concat, and its axis
KNOBS_ATTR = "tvm_fuse.knobs"  # on a scheduled kernel: "tuned" (from a record) or "default"
SCHEDULE_RULE = "schedule_rule"  # block attribute: the rule that schedules the kernel (below)
DOT_PRODUCT_ATTR = "tvm_fuse.dot_product"  # block attribute: the instruction a dot-product kernel is tensorized with
PREFETCH_ATTR = "tvm_fuse.prefetch_next_strip"  # loop attribute: prefetch the next strip's operand
PEEL_ATTR = "tvm_fuse.peel_tile_tail"  # on a store block whose guard holds in all but the last tiles
UNPEELED_ATTR = "tvm_fuse.unpeeled"  # kernel attribute: lower its guarded stores as they are (`codegen`)

# -- Schedule rules: one per compute of `tvm_fuse.compute`, scheduled by `tvm_fuse.schedules` ----
ATTENTION_RULE = "tvm_fuse.attention"
ATTENTION_BF16_RULE = "tvm_fuse.attention_bf16"
CONV_NCHW_RULE = "tvm_fuse.conv_nchw"
CONV_NCHWC_RULE = "tvm_fuse.conv_nchwc"
CONV_NCHWC_INT8_RULE = "tvm_fuse.conv_nchwc_int8"
CONV_NCHWC_BF16_RULE = "tvm_fuse.conv_nchwc_bf16"
CONV_NCHWC_AMX_RULE = "tvm_fuse.conv_nchwc_amx"  # an int8 or bf16 NCHW{c}c conv on AMX tiles
DEPTHWISE_NCHWC_RULE = "tvm_fuse.depthwise_nchwc"
LRN_RULE = "tvm_fuse.lrn"
MATMUL_RULE = "tvm_fuse.matmul"
DENSE_PACKED_RULE = "tvm_fuse.dense_packed"
DENSE_BF16_RULE = "tvm_fuse.dense_bf16"
DENSE_INT8_RULE = "tvm_fuse.dense_int8"
DENSE_INT8_GROUPS_RULE = "tvm_fuse.dense_int8_groups"
DENSE_AMX_RULE = "tvm_fuse.dense_amx"  # a bf16 or u8 x s8 dense product on AMX tiles
DENSE_AMX_GROUPS_RULE = "tvm_fuse.dense_amx_groups"
ROWWISE_RULE = "tvm_fuse.rowwise"
WINOGRAD_NCHWC_RULE = "tvm_fuse.winograd_nchwc"
WINOGRAD_NCHWC_BF16_RULE = "tvm_fuse.winograd_nchwc_bf16"
