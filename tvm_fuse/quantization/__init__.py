"""int8 inference below the pipeline: what a build's `QuantConfig` says (`config`), the
calibration samples (`calibration_data`), their statistics and ranges (`statistics`,
`ranges`), where int8 can run (`points`) and the weights' quantization (`weights`);
`transform.realize.int8` builds the int8 kernels and `tvm_fuse.calibrate`, above the pipeline,
runs the fp32 model to calibrate."""
