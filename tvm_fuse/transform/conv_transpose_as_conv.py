"""A transposed conv (1-D or 2-D) as a conv of its stride's phases and a depth-to-space.

Per spatial axis, with stride s and kernel k, output row Y takes input row h through kernel tap ky where
Y + pad = h * s + ky; writing Y + pad = q * s + r (0 <= r < s), the taps are ky = r + s * m and
h = q - m for m < ceil(k / s) = M. So each phase r is a plain conv of x with M taps, the phase's
taps in reverse order, and all phases together are one conv with C_out * s * s outputs (an M x M
kernel, M - 1 rows of padding before), whose outputs are placed by a depth-to-space and the
padding cropped. With kernel == stride it is a 1x1 conv. TVM's own conv2d_transpose kernel is a
scalar loop nest; as convs they run on our conv kernels.
"""

from __future__ import annotations

import numpy as np
import tvm
from tvm import relax
from tvm.ir.expr import GenericConst

from .relax_helpers import rebind_pass


def ConvTransposeAsConv() -> tvm.transform.Pass:
    return rebind_pass("tvm_fuse.ConvTransposeAsConv", _plan)


def _plan(func: relax.Function) -> dict[relax.Var, relax.Expr]:
    values = dict(relax.analysis.get_var2val(func).items())
    return {var: rewritten for var, value in values.items() if (rewritten := _as_conv(value)) is not None}


def _ints(values) -> list[int]:
    return [int(v) for v in values]


_TRANSPOSED = {"relax.nn.conv1d_transpose": (("NCW", "IOW", "NCW"), relax.op.nn.conv1d),
               "relax.nn.conv2d_transpose": (("NCHW", "IOHW", "NCHW"), relax.op.nn.conv2d)}


def _as_conv(call) -> relax.Expr | None:
    if not isinstance(call, relax.Call) or not isinstance(call.op, tvm.ir.Op) or call.op.name not in _TRANSPOSED:
        return None
    layouts, conv_op = _TRANSPOSED[call.op.name]
    data, weight = call.args
    attrs = call.attrs
    if ((str(attrs.data_layout), str(attrs.kernel_layout), str(attrs.out_layout)) != layouts
            or not isinstance(weight, GenericConst) or int(attrs.groups) != 1):
        return None
    shape = data.ty.shape
    if shape is None or not all(isinstance(d, tvm.tirx.IntImm) for d in shape):
        return None
    kernel = weight.value.numpy()  # [C_in, C_out, *k]
    rank = kernel.ndim - 2
    if _ints(attrs.dilation) != [1] * rank or call.ty.shape is None:
        return None
    batch, _, *size = _ints(shape)
    out_size = _ints(call.ty.shape.values[2:])
    before = _ints(attrs.padding)[:rank]
    channels_in, channels_out, *taps_per_axis = kernel.shape
    strides = _ints(attrs.strides)
    m = [-(-k // s) for k, s in zip(taps_per_axis, strides)]
    # Phases q of the output: the input's, and enough to cover its last row and column past the padding.
    rows = [max(n, (o - 1 + b) // s + 1) for n, o, b, s in zip(size, out_size, before, strides)]
    taps = np.zeros((channels_in, channels_out, *(mi * s for mi, s in zip(m, strides))), kernel.dtype)
    taps[(slice(None), slice(None), *(slice(k) for k in taps_per_axis))] = kernel
    split = [extent for mi, s in zip(m, strides) for extent in (mi, s)]
    taps = taps.reshape(channels_in, channels_out, *split)[(slice(None), slice(None), *[slice(None, None, -1), slice(None)] * rank)]
    # [c, o, m0, r0, m1, r1, ...] -> [o, r0, r1, ..., c, m0, m1, ...]
    order = [1, *(3 + 2 * a for a in range(rank)), 0, *(2 + 2 * a for a in range(rank))]
    phases = taps.transpose(order).reshape(channels_out * int(np.prod(strides)), channels_in, *m)
    conv = conv_op(data, relax.const(np.ascontiguousarray(phases)),
                   padding=[*(mi - 1 for mi in m), *(r - n for r, n in zip(rows, size))], out_dtype=str(call.ty.dtype))
    tiles = relax.op.reshape(conv, [batch, channels_out, *strides, *rows])
    placed = relax.op.permute_dims(tiles, [0, 1, *(i for a in range(rank) for i in (2 + rank + a, 2 + a))])  # [n, o, q, r, q', r']
    placed = relax.op.reshape(placed, [batch, channels_out, *(r * s for r, s in zip(rows, strides))])
    if before == [0] * rank and out_size == [r * s for r, s in zip(rows, strides)]:
        return placed
    return relax.op.strided_slice(placed, axes=list(range(2, 2 + rank)), begin=before,
                                  end=[b + o for b, o in zip(before, out_size)])
