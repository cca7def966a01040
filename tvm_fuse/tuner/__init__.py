"""The auto-tuner, above the pipeline: a model's tasks (`tasks`), knob settings timed in a
worker process or on an RPC device (`measure`), the XGBoost cost model (`cost_model`) and the
search that appends each result to a tuning log (`tune`); `tvm_fuse.tuning` reads and keeps
the records a build uses."""
