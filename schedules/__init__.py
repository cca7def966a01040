"""x86 schedules for tvm_fuse's compute definitions (installed as `tvm_fuse.schedules`).

Compute definitions live in the package, their schedules here, so that each can change
without the other. Until the NCHWc kernels land, kernels use TVM's default lowering.
"""
