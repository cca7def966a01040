"""int8 inference: calibration (`calibrate`), its table of scales (`table`), where int8 can run
(`points`), and the weights' quantization (`weights`); `transform.realize.int8` builds the
int8 kernels."""
