"""A 1-D conv with few output positions, or a strided or grouped one over many channels, as a
gather of its input windows and a dense layer (for each group); one whose single output reads
its whole input as a dense layer on the input itself.

The direct conv kernel vectorizes along the output row; a row shorter than a vector leaves the
lanes to strided gathers of the input, and so does a stride (Silero VAD's STFT: one input
channel, 256 taps, stride 128, 4 outputs per chunk). Its windows, gathered once as rows
(`y[n, o, w] = sum_{c,k} x[n, c, w*s + k*d] * W[o, c, k]`, an im2col), make a product our
dense kernel runs at several times that. Only convs with enough work change: for a small one
the two added kernels cost more than they save.
"""

from __future__ import annotations

import numpy as np
import tvm
from tvm import relax
from tvm.ir.expr import GenericConst

from .relax_helpers import is_op, rebind_pass

MIN_FLOPS = 2e6  # below this, the direct kernel's one call beats three calls
MIN_PRODUCT_REDUCTION = 64  # a strided or grouped conv's channels x taps per group from which a product wins


def Conv1dAsDense(lanes: int) -> tvm.transform.Pass:
    return rebind_pass("tvm_fuse.Conv1dAsDense", lambda func: _plan(func, lanes))


def _plan(func: relax.Function, lanes: int) -> dict[relax.Var, relax.Expr]:
    values = dict(relax.analysis.get_var2val(func).items())
    return {var: rewritten for var, value in values.items() if (rewritten := _as_dense(value, lanes)) is not None}


def _direct_is_slow(stride: int, groups: int, reduction: int) -> bool:
    """A conv whose direct kernel gathers its input (the vector's outputs lie `stride` apart),
    or a grouped one, with a reduction per output (`reduction`: its group's channels x taps)
    long enough for a product (wav2vec2's strided and grouped convs: performance log);
    ungrouped convs of stride 1 run faster direct."""
    return (stride > 1 or groups > 1) and reduction >= MIN_PRODUCT_REDUCTION


def _min_flops(width: int, lanes: int) -> float:
    """The work from which the product pays for its two added kernels: `MIN_FLOPS`, less for a
    row of under a quarter of a vector, in which the direct kernel computes `width` of its
    `lanes` (Silero VAD v6's convs over rows of 1 and 2 at batch 32: 8% of the peak)."""
    return MIN_FLOPS * min(1.0, 4 * width / lanes)


def _as_dense(call, lanes: int) -> relax.Expr | None:
    if not is_op(call, "relax.nn.conv1d"):
        return None
    data, weight = call.args
    attrs = call.attrs
    layouts = (str(attrs.data_layout), str(attrs.kernel_layout), str(attrs.out_layout))
    if layouts != ("NCW", "OIW", "NCW") or not isinstance(weight, GenericConst):
        return None
    if str(data.ty.dtype) != "float32" or data.ty.shape is None or not all(isinstance(d, tvm.tirx.IntImm) for d in data.ty.shape):
        return None
    batch, channels, _ = (int(d) for d in data.ty.shape)
    kernel = weight.value.numpy()  # [O, C / groups, K]
    outputs, per_group, taps = kernel.shape
    groups = int(attrs.groups)
    (stride,), (dilation,) = (int(s) for s in attrs.strides), (int(d) for d in attrs.dilation)
    before, after = (int(p) for p in attrs.padding)
    width = int(call.ty.shape[2])
    reduction = per_group * taps
    if groups > 1 and per_group == 1:  # depthwise: no product to make
        return None
    if width == 1 and groups == 1 and not (before or after) and taps == int(data.ty.shape[2]):
        # A squeeze-excitation block's 1x1 over a pooled vector: the direct kernel runs its
        # one-wide row in scalar code, the dense kernel vectorizes the outputs. The input's
        # [C, K] order is the weight's: no gather, no kernel more.
        rows = relax.op.reshape(data, [batch, reduction])
        product = relax.op.matmul(rows, relax.const(np.ascontiguousarray(kernel.reshape(outputs, reduction).T)))
        return relax.op.reshape(product, [batch, outputs, 1])
    direct_suffices = (width >= lanes or groups > 1) and not _direct_is_slow(stride, groups, reduction)
    if direct_suffices or 2 * batch * width * outputs * reduction < _min_flops(width, lanes):
        return None
    padded = relax.op.nn.pad(data, [0, 0, 0, 0, before, after]) if before or after else data
    starts = relax.const((np.arange(width)[:, None] * stride + np.arange(taps)[None, :] * dilation).astype("int64"))
    if groups == 1:  # one product of N * W rows, tap-major
        # Gathered from the input channels-last, each window is a run of whole rows, and its
        # row of the product a reshape away. The transpose fuses with what precedes it:
        # between wav2vec2's feature convs, with the previous product's transpose and GELU,
        # which then reads and writes both channels-last.
        windows = relax.op.take(relax.op.permute_dims(padded, [0, 2, 1]), starts, axis=1)  # [N, W, K, C]
        weights = kernel.transpose(2, 1, 0).reshape(reduction, outputs)  # [K * C, O]
        product = relax.op.matmul(relax.op.reshape(windows, [batch * width, reduction]),
                                  relax.const(np.ascontiguousarray(weights)))
        return relax.op.permute_dims(relax.op.reshape(product, [batch, width, outputs]), [0, 2, 1])
    windows = relax.op.take(padded, starts, axis=2)  # [N, C, W, K]
    weights = kernel.reshape(groups, outputs // groups, reduction).transpose(0, 2, 1)  # [G, C/G * K, O/G]
    # Each group's windows as rows [N, G, W, C/G * K] times its weight.
    grouped = relax.op.reshape(windows, [batch, groups, per_group, width, taps])
    rows = relax.op.reshape(relax.op.permute_dims(grouped, [0, 1, 3, 2, 4]), [batch, groups, width, reduction])
    product = relax.op.matmul(rows, relax.const(np.ascontiguousarray(weights)))  # [N, G, W, O/G]
    return relax.op.reshape(relax.op.permute_dims(product, [0, 1, 3, 2]), [batch, outputs, width])
