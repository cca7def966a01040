"""Tuning records: which schedule knobs a kernel runs with, keyed by workload and CPU class
(the log format, `records`; the store a build reads, `database`; a kernel's key, `workload`).
The tuner that writes them is `tvm_fuse.tuner`."""
