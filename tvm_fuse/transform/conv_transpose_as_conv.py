"""A transposed conv as a conv of its stride's phases and a depth-to-space.

With stride s and kernel k, output row Y takes input row h through kernel tap ky where
Y + pad = h * s + ky; writing Y + pad = q * s + r (0 <= r < s), the taps are ky = r + s * m and
h = q - m for m < ceil(k / s) = M. So each phase r is a plain conv of x with M taps, the phase's
taps in reverse order, and all phases together are one conv with C_out * s * s outputs (an M x M
kernel, M - 1 rows of padding before), whose outputs are placed by a depth-to-space and the
padding cropped. With kernel == stride it is a 1x1 conv. TVM's own conv2d_transpose kernel is a
scalar loop nest: PP-OCRv4 det's two upsampling heads (2x2, stride 2) took 24 of its 41 ms, and a
U-Net's 4x4 stride-2 upsampling 17 ms (Zen 4); as convs they run on our conv kernels.
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
    if _ints(attrs.dilation) != [1, 1] or call.ty.shape is None:
        return None
    batch, _, height, width = _ints(shape)
    out_height, out_width = _ints(call.ty.shape.values[2:])
    top, left = _ints(attrs.padding)[:2]
    channels_in, channels_out, kh, kw = kernel.shape
    sh, sw = _ints(attrs.strides)
    mh, mw = -(-kh // sh), -(-kw // sw)
    # Phases q of the output: the input's, and enough to cover its last row and column past the padding.
    rows, columns = max(height, (out_height - 1 + top) // sh + 1), max(width, (out_width - 1 + left) // sw + 1)
    taps = np.zeros((channels_in, channels_out, mh * sh, mw * sw), kernel.dtype)
    taps[:, :, :kh, :kw] = kernel
    taps = taps.reshape(channels_in, channels_out, mh, sh, mw, sw)[:, :, ::-1, :, ::-1, :]  # [c, o, m, r, n, t]
    phases = taps.transpose(1, 3, 5, 0, 2, 4).reshape(channels_out * sh * sw, channels_in, mh, mw)
    conv = relax.op.nn.conv2d(data, relax.const(np.ascontiguousarray(phases)),
                              padding=[mh - 1, mw - 1, rows - height, columns - width], out_dtype=str(call.ty.dtype))
    tiles = relax.op.reshape(conv, [batch, channels_out, sh, sw, rows, columns])
    placed = relax.op.permute_dims(tiles, [0, 1, 4, 2, 5, 3])  # [n, o, q, r, q', r']
    placed = relax.op.reshape(placed, [batch, channels_out, rows * sh, columns * sw])
    if (top, left, out_height, out_width) == (0, 0, rows * sh, columns * sw):
        return placed
    return relax.op.strided_slice(placed, axes=[2, 3], begin=[top, left], end=[top + out_height, left + out_width])
