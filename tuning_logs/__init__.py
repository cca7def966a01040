"""Tuning records shipped with tvm_fuse (installed as `tvm_fuse.tuning_logs`); see README.md."""
