"""Convolutions in the blocked layout NCHW{c}c, with c the target's fp32 vector width.

TVM's `ConvertLayout` rewrites each conv and propagates the layout through the ops that
follow (elementwise ops, residual adds, pooling, concat along channels, reductions), so
`layout_transform` is left only where a chain enters or leaves the blocked layout. The weights'
transforms are constants, folded at build time. Fewer input channels than a block (an image's
3) are one block of their own; other channel counts take the block or half of it; a conv
whose channels neither divides keeps NCHW (and its NCHW kernel), as do grouped convs other than
depthwise.
"""

from __future__ import annotations

import tvm
from tvm import relax

_KEEP = {"relax.nn.conv2d": ["NCHW", "OIHW"]}


def _layouts(block: int):
    def choose(call: relax.Call) -> dict:
        if call.op.name != "relax.nn.conv2d":
            return {}
        attrs = call.attrs
        if (attrs.data_layout, attrs.kernel_layout, attrs.out_layout) != ("NCHW", "OIHW", "NCHW"):
            return _KEEP
        data, weight = call.args
        shapes = (data.ty.shape, weight.ty.shape)
        if any(s is None for s in shapes) or str(data.ty.dtype) != "float32":
            return _KEEP
        channels, outputs = data.ty.shape[1], weight.ty.shape[0]
        if not all(isinstance(d, tvm.tirx.IntImm) for d in (channels, outputs)):
            return _KEEP
        channels, outputs, groups = int(channels), int(outputs), int(attrs.groups)
        if groups == 1:
            # Fewer input channels than a block (an image's 3) form one block of their own;
            # otherwise inputs and outputs take the widest block that divides them (24: 8).
            inputs = channels if channels < block else _widest_block(channels, block)
            out_block = _widest_block(outputs, block)
            if inputs is None or out_block is None:
                return _KEEP
            return {"relax.nn.conv2d": [f"NCHW{inputs}c", f"OIHW{inputs}i{out_block}o", f"NCHW{out_block}c"]}
        if groups == channels == outputs and outputs % block == 0:  # depthwise
            return {"relax.nn.conv2d": [f"NCHW{block}c", f"OIHW1i{block}o"]}
        return _KEEP

    return choose


def _widest_block(channels: int, block: int) -> int | None:
    """The vector width or half of it, whichever divides `channels` first."""
    return next((b for b in (block, block // 2) if channels % b == 0), None)


def BlockedLayout(block: int) -> tvm.transform.Pass:
    convert = relax.transform.ConvertLayout({}, _layouts(block))

    @tvm.transform.module_pass(opt_level=0, name="tvm_fuse.BlockedLayout")
    def blocked_layout(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        return convert(mod)

    return blocked_layout
