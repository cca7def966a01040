"""What the benchmarks and `tvm-fuse bench` use, never imported by building or running a model:
the other runtimes side by side (`compare`, `ort_quantize`), the machine's measured peaks
(`peak`), a model's FLOPs (`flops`), and the models (`models`) and data (`datasets`) they run."""
