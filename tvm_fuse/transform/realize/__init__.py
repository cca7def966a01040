"""Narrow precisions: the fused composites that run as int8 or bf16 kernels.

`composite` is the analysis they share: a composite's anchor (the conv or product it is built
around) and where its data and weight come in, whether it is a depthwise conv, and which
outputs stay narrow between kernels (the largest set whose every reader takes them so). `int8`
(`RealizeInt8`, on a calibration table's scales), `bf16` (`RealizeBf16`) and
`integer_products` (`RealizeIntegerProducts`: a dynamically quantized model's own integer
products, in every build) are its users, each with its pass factory (`realize_int8`,
`bf16_pass`, `realize_integer_products`).
"""
