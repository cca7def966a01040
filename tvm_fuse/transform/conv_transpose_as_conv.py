"""A transposed conv whose kernel equals its stride as a 1x1 conv and a depth-to-space.

With kernel == stride, no padding and no dilation, each input pixel writes its own s x s output
tile: y[n, o, h*s + i, w*s + j] = sum_c x[n, c, h, w] * W[c, o, i, j]. That is a 1x1 conv to
C_out * s * s channels, then a reshape and permute into place. TVM's own conv2d_transpose
kernel is a scalar loop nest: PP-OCRv4 det's two upsampling heads (2x2, stride 2) took 24 of
its 41 ms; as 1x1 convs they run on our blocked conv kernels.
"""

from __future__ import annotations

import numpy as np
import tvm
from tvm import relax
from tvm.ir.expr import GenericConst

from .rebind import is_op, rebind_pass


def ConvTransposeAsConv() -> tvm.transform.Pass:
    return rebind_pass("tvm_fuse.ConvTransposeAsConv", _plan)


def _plan(func: relax.Function) -> dict[relax.Var, relax.Expr]:
    values = dict(relax.analysis.get_var2val(func).items())
    return {var: rewritten for var, value in values.items() if (rewritten := _as_conv(value)) is not None}


def _ints(values) -> list[int]:
    return [int(v) for v in values]


def _as_conv(call) -> relax.Expr | None:
    if not is_op(call, "relax.nn.conv2d_transpose"):
        return None
    data, weight = call.args
    attrs = call.attrs
    layouts = (str(attrs.data_layout), str(attrs.kernel_layout), str(attrs.out_layout))
    if layouts != ("NCHW", "IOHW", "NCHW") or not isinstance(weight, GenericConst) or int(attrs.groups) != 1:
        return None
    shape = data.ty.shape
    if shape is None or not all(isinstance(d, tvm.tirx.IntImm) for d in shape):
        return None
    kernel = weight.value.numpy()  # [C_in, C_out, kh, kw]
    stride = _ints(attrs.strides)
    if (list(kernel.shape[2:]) != stride or any(_ints(attrs.padding)) or any(_ints(attrs.output_padding))
            or _ints(attrs.dilation) != [1, 1]):
        return None
    batch, _, height, width = _ints(shape)
    channels_in, channels_out, sh, sw = kernel.shape
    as_1x1 = kernel.transpose(1, 2, 3, 0).reshape(channels_out * sh * sw, channels_in, 1, 1)
    tiles = relax.op.nn.conv2d(data, relax.const(np.ascontiguousarray(as_1x1)), out_dtype=str(call.ty.dtype))
    tiles = relax.op.reshape(tiles, [batch, channels_out, sh, sw, height, width])
    placed = relax.op.permute_dims(tiles, [0, 1, 4, 2, 5, 3])  # [n, o, h, i, w, j]
    return relax.op.reshape(placed, [batch, channels_out, height * sh, width * sw])
