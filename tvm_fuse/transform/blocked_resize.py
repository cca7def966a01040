"""Resize a blocked tensor in its blocks.

TVM's layout rule for `image.resize2d` takes no blocked layout, so a blocked chain that
upsamples (the feature pyramid of PaddleOCR's DB-Net detectors) goes back to NCHW before the
resize and into the blocks after it: two copies of the tensor, one at the resized size. TOPI's
resize reads and writes NCHW{c}c as well, so `layout_transform(resize2d(layout_transform(x)))`
back to x's blocks is the resize of x in them.
"""

from __future__ import annotations

import tvm
from tvm import relax

from .relax_helpers import blocked_from_nchw, is_op, nchw_from_blocked, rebind_pass


def BlockedResize() -> tvm.transform.Pass:
    return rebind_pass("tvm_fuse.BlockedResize", _plan)


def _plan(func: relax.Function) -> dict[relax.Var, relax.Expr]:
    values = relax.analysis.get_var2val(func)
    plan = {}
    for var, value in values.items():
        resized = blocked_from_nchw(value)
        resize = values.get(resized) if isinstance(resized, relax.Var) else None
        if not is_op(resize, "relax.image.resize2d") or str(resize.attrs.layout) != "NCHW":
            continue
        source = nchw_from_blocked(values.get(resize.args[0])) if isinstance(resize.args[0], relax.Var) else None
        if source is None or int(source.ty.shape[-1]) != int(value.ty.shape[-1]):
            continue
        attrs = resize.attrs
        out_dtype = str(attrs.out_dtype)
        plan[var] = relax.op.image.resize2d(
            source, resize.args[1], roi=[float(r) for r in attrs.roi], layout=f"NCHW{int(value.ty.shape[-1])}c",
            method=str(attrs.method), coordinate_transformation_mode=str(attrs.coordinate_transformation_mode),
            rounding_method=str(attrs.rounding_method), cubic_alpha=float(attrs.cubic_alpha),
            cubic_exclude=int(attrs.cubic_exclude), extrapolation_value=float(attrs.extrapolation_value),
            out_dtype=None if out_dtype in ("", "None", "void") else out_dtype)
    return plan
