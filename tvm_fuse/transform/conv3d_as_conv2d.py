"""A 3-D conv whose kernel is one frame deep (no padding or stride along depth) as a 2-D conv
of every frame: TVM's conv3d kernel is a scalar loop nest (RivaGAN's 11x11 convs over one
256x256 frame took 4.5 s each), where a 2-D conv runs on our blocked kernels. One frame is a
squeeze and an expand_dims around the conv; several are moved into the batch and back."""

from __future__ import annotations

import tvm
from tvm import relax
from tvm.ir.expr import GenericConst

from .relax_helpers import is_op, rebind_pass

_LAYOUTS = ("NCDHW", "OIDHW", "NCDHW")


def Conv3dAsConv2d() -> tvm.transform.Pass:
    return rebind_pass("tvm_fuse.Conv3dAsConv2d", _plan)


def _plan(func: relax.Function) -> dict[relax.Var, relax.Expr]:
    return {var: rewritten for var, value in relax.analysis.get_var2val(func).items()
            if (rewritten := _as_conv2d(value)) is not None}


def _as_conv2d(call) -> relax.Expr | None:
    if not is_op(call, "relax.nn.conv3d"):
        return None
    data, weight = call.args
    attrs = call.attrs
    if (str(attrs.data_layout), str(attrs.kernel_layout), str(attrs.out_layout)) != _LAYOUTS \
            or not isinstance(weight, GenericConst) or call.ty.shape is None or data.ty.shape is None:
        return None
    kernel = weight.value.numpy()  # [O, I, D, H, W]
    strides, padding, dilation = ([int(v) for v in values] for values in (attrs.strides, attrs.padding, attrs.dilation))
    if kernel.shape[2] != 1 or strides[0] != 1 or padding[0] != 0 or padding[3] != 0:
        return None

    def conv(frames):
        return relax.op.nn.conv2d(frames, relax.const(kernel[:, :, 0]), strides=strides[1:],
                                  padding=[padding[1], padding[2], padding[4], padding[5]], dilation=dilation[1:],
                                  groups=int(attrs.groups), out_dtype=str(call.ty.dtype))

    batch, channels, depth, height, width = data.ty.shape.values
    if isinstance(depth, tvm.tirx.IntImm) and int(depth) == 1:
        return relax.op.expand_dims(conv(relax.op.squeeze(data, [2])), 2)
    frames = relax.op.reshape(relax.op.permute_dims(data, [0, 2, 1, 3, 4]), [batch * depth, channels, height, width])
    _, outputs, _, out_height, out_width = call.ty.shape.values
    per_frame = relax.op.reshape(conv(frames), [batch, depth, outputs, out_height, out_width])
    return relax.op.permute_dims(per_frame, [0, 2, 1, 3, 4])
