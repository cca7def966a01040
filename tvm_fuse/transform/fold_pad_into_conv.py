"""A conv whose input is zero-padded by a Pad of its own (PyTorch's "same" padding for odd
strides, TF-style exports, `nn.ZeroPad2d`) pads its input itself: the Pad's padding joins the
conv's. The Pad was a kernel of its own in plain NCHW, so a chain of blocked convs left the
blocked layout and came back around each one (EfficientNet from transformers: 56 Pads, 326
layout transforms, a fifth of its run).
"""

from __future__ import annotations

import tvm
from tvm import relax

from .relax_helpers import is_op, rebind_pass

_CONVS = {"relax.nn.conv1d": ("NCW", 1), "relax.nn.conv2d": ("NCHW", 2)}


def FoldPadIntoConv() -> tvm.transform.Pass:
    return rebind_pass("tvm_fuse.FoldPadIntoConv", _plan)


def _plan(func: relax.Function) -> dict[relax.Var, relax.Expr]:
    values = dict(relax.analysis.get_var2val(func).items())
    plan = {}
    for var, call in values.items():
        if is_op(call, *_CONVS) and isinstance(call.args[0], relax.Var):
            padding = _spatial_zero_padding(values.get(call.args[0]), *_CONVS[call.op.name], call.attrs)
            if padding is not None:
                plan[var] = _padded_conv(call, values[call.args[0]].args[0], padding)
    return plan


def _spatial_zero_padding(pad, layout: str, rank: int, attrs) -> list[int] | None:
    """The padding a conv of `attrs` gets with `pad`'s (Relax's order: all leading pads, then
    all trailing), if `pad` is a zero pad of the spatial axes only of a conv input in `layout`."""
    if not is_op(pad, "relax.nn.pad") or str(attrs.data_layout) != layout:
        return None
    if str(pad.attrs.pad_mode) != "constant" or float(pad.attrs.pad_value) != 0.0:
        return None
    widths = [int(w) for w in pad.attrs.pad_width]
    if len(widths) != 2 * (rank + 2) or any(widths[:4]):
        return None
    own = [int(p) for p in attrs.padding]
    before = [own[a] + widths[4 + 2 * a] for a in range(rank)]
    after = [own[rank + a] + widths[5 + 2 * a] for a in range(rank)]
    return before + after


def _padded_conv(call: relax.Call, data: relax.Expr, padding: list[int]) -> relax.Call:
    """The conv `call` reading `data` with `padding`, its other attributes as they were."""
    attrs = call.attrs
    make = relax.op.nn.conv1d if call.op.name == "relax.nn.conv1d" else relax.op.nn.conv2d
    return make(data, call.args[1], strides=attrs.strides, padding=padding, dilation=attrs.dilation,
                groups=attrs.groups, data_layout=attrs.data_layout, kernel_layout=attrs.kernel_layout,
                out_layout=attrs.out_layout, out_dtype=attrs.out_dtype)
