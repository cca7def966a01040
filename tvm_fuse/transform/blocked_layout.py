"""Convolutions in the blocked layout NCHW{c}c, with c the target's fp32 vector width (or,
in a bf16 build for AMX, twice it where that leaves no more in NCHW: `BlockedLayout`).

TVM's `ConvertLayout` rewrites each conv and propagates the layout through the ops that
follow (elementwise ops, residual adds, pooling, concat along channels, reductions), so
`layout_transform` is left only where a chain enters or leaves the blocked layout. The weights'
transforms are constants, folded at build time. Fewer input channels than a block (an image's
3) are one block of their own; other channel counts take the block or half of it (depthwise
convs too); a conv whose channels neither divides keeps NCHW (and its NCHW kernel), as do
grouped convs other than depthwise.

TVM's layout rules get some ops wrong in a blocked layout (TVM 0.27, `src/relax/op`): a split
at channel indices keeps the indices in channels while the axis now counts blocks (a crash, or
silently wrong halves); a channel concat of inputs blocked differently, or a reduction over
channels, asks for a conversion between two blocked layouts, which `ConvertLayout` cannot do;
a binary op whose other operand has fewer dims, or other channels, fails to broadcast;
transposed convs get no layout at all. Before each such op a border is drawn: its input goes
through a reshape to its own shape, which has no layout rule, so `ConvertLayout` brings the
input back to NCHW there; the same-shape reshapes go afterwards. What no rule covers fails the
conversion, and the model then stays in NCHW, with a warning: slower, never wrong.
"""

from __future__ import annotations

import warnings

import tvm
from tvm import relax
from tvm.relax.expr_functor import PyExprMutator, mutator

from .relax_helpers import mutate_functions
from .remove_noops import RemoveNoOps

_KEEP = {"relax.nn.conv2d": ["NCHW", "OIHW"]}
# Ops whose layout rule reads desired layouts; answered with their own layouts, they stay as
# they are and take their input back in NCHW (unanswered, TVM's rule crashes on a blocked input).
_OWN_LAYOUTS = ("relax.nn.conv1d", "relax.nn.conv3d", "relax.nn.conv1d_transpose",
                "relax.nn.conv2d_transpose", "relax.nn.conv3d_transpose")
_REDUCTIONS = ("relax.mean", "relax.sum", "relax.max", "relax.min", "relax.prod", "relax.variance", "relax.std")
_BINARY = ("relax.add", "relax.subtract", "relax.multiply", "relax.divide", "relax.floor_divide",
           "relax.power", "relax.maximum", "relax.minimum", "relax.mod", "relax.floor_mod",
           "relax.equal", "relax.not_equal", "relax.greater", "relax.greater_equal", "relax.less",
           "relax.less_equal", "relax.logical_and", "relax.logical_or", "relax.logical_xor")


def _layouts(block: int, halves_depthwise: bool = True):
    def choose(call: relax.Call) -> dict:
        if call.op.name in _OWN_LAYOUTS:
            attrs = call.attrs
            return {call.op.name: [attrs.data_layout, attrs.kernel_layout, attrs.out_layout]}
        if call.op.name != "relax.nn.conv2d":
            return {}
        attrs = call.attrs
        if (attrs.data_layout, attrs.kernel_layout, attrs.out_layout) != ("NCHW", "OIHW", "NCHW"):
            return _KEEP
        data, weight = call.args
        if data.ty.shape is None or weight.ty.shape is None:
            return _KEEP
        channels, outputs = data.ty.shape[1], weight.ty.shape[0]
        if not all(isinstance(d, tvm.tirx.IntImm) for d in (channels, outputs)):
            return _KEEP
        channels, outputs, groups = int(channels), int(outputs), int(attrs.groups)
        if plain_reason(channels, outputs, groups, str(data.ty.dtype), block, halves_depthwise) is not None:
            return _KEEP
        if groups == 1:
            # Fewer input channels than a block (an image's 3) form one block of their own;
            # otherwise inputs and outputs take the widest block that divides them (24: 8).
            inputs = channels if channels < block else _widest_block(channels, block)
            out_block = _widest_block(outputs, block)
            return {"relax.nn.conv2d": [f"NCHW{inputs}c", f"OIHW{inputs}i{out_block}o", f"NCHW{out_block}c"]}
        if groups == channels:  # depthwise, in half blocks where whole ones do not divide (24: 8)
            depthwise_block = _widest_block(channels, block) if halves_depthwise else block
            return {"relax.nn.conv2d": [f"NCHW{depthwise_block}c", f"OIHW1i{depthwise_block}o"]}
        return {"relax.nn.conv2d": [f"NCHW{block}c", f"OIHW{block}i{block}o"]}  # each group whole blocks

    return choose


def plain_reason(channels: int, outputs: int, groups: int, dtype: str, block: int,
                 halves_depthwise: bool = True) -> str | None:
    """Why a 2-D conv of these channels keeps NCHW with blocks of `block` (None: it is blocked).
    A depthwise conv takes half a block where a whole one does not divide its channels, unless
    not `halves_depthwise` (an AMX build's wide blocks: half of them would border its neighbours')."""
    if dtype != "float32":
        return f"its input is {dtype}; the blocked layout is chosen for float32 convs"
    if groups == 1:
        if channels >= block and _widest_block(channels, block) is None:
            return f"neither {block} nor {block // 2} divides its {channels} input channels"
        if _widest_block(outputs, block) is None:
            return f"neither {block} nor {block // 2} divides its {outputs} output channels"
        return None
    if groups == channels == outputs:
        if not halves_depthwise and outputs % block:
            return f"a depthwise conv of {outputs} channels, which {block} does not divide"
        if _widest_block(outputs, block) is None:
            return f"a depthwise conv of {outputs} channels, which neither {block} nor {block // 2} divides"
        return None
    if (channels // groups) % block or (outputs // groups) % block:
        return (f"a grouped conv ({groups} groups of {channels // groups} input and {outputs // groups} output "
                f"channels), whose groups are not whole blocks of {block}")
    return None


def _widest_block(channels: int, block: int) -> int | None:
    """The vector width or half of it, whichever divides `channels` first."""
    return next((b for b in (block, block // 2) if channels % b == 0), None)


def _shape(expr) -> list[int | None] | None:
    """The static dims of a tensor (None for a symbolic one), or None if not a tensor of known shape."""
    ty = expr if isinstance(expr, relax.TensorType) else expr.ty
    if not isinstance(ty, relax.TensorType) or not isinstance(ty.shape, relax.ShapeExpr):
        return None
    return [int(d) if isinstance(d, tvm.tirx.IntImm) else None for d in ty.shape.values]


def _channel_axis(axis) -> bool:
    return axis is not None and int(axis) % 4 == 1


def _border_args(call: relax.Call, block: int) -> list[int]:
    """Positions of `call`'s arguments that must reach it in NCHW (a tuple: all its fields)."""
    name = call.op.name
    out = _shape(call) if isinstance(call.ty, relax.TensorType) else None
    if name == "relax.split":  # split indices would stay in channels while the axis counts blocks
        data = _shape(call.args[0])
        sections = call.attrs.indices_or_sections
        if data and len(data) == 4 and _channel_axis(call.attrs.axis) and not isinstance(sections, int | tvm.tirx.IntImm):
            return [0]
    elif name in ("relax.concat", "relax.stack"):
        fields = [_shape(f) if isinstance(f, relax.TensorType) else None for f in call.args[0].ty.fields]
        if any(s is None or len(s) != 4 for s in fields):
            return []
        if name == "relax.stack":  # its rule names the new axis "S", which later rules reject
            return [0]
        if _channel_axis(call.attrs.axis):  # every input must be blocked as the result is
            channels = [s[1] for s in fields] + [out[1] if out else None]
            # a symbolic channel count has no block to agree on
            if None in channels or len({_widest_block(c, block) for c in channels}) > 1:
                return [0]
    elif name in _REDUCTIONS:
        data, axes = _shape(call.args[0]), call.attrs.axis
        if data and len(data) == 4 and (axes is None or any(_channel_axis(a) for a in axes)):
            return [0]
    elif name in _BINARY and out and len(out) == 4:
        shapes = [_shape(a) for a in call.args[:2]]
        if str(call.ty.dtype) == "bool":  # TVM cannot lower a layout transform of bools
            return [i for i, s in enumerate(shapes) if s]
        if any(s is None or 0 < len(s) < 4 or (len(s) == 4 and s[1] != out[1]) for s in shapes):
            return [i for i, s in enumerate(shapes) if s]
    return []


@mutator
class _Borders(PyExprMutator):
    """`op(x)` -> `op(reshape(x, x.shape))` where `_border_args` says x must arrive in NCHW."""

    def __init__(self, mod: tvm.IRModule, block: int):
        super().__init__(mod)
        self.block = block

    def visit_call_(self, call: relax.Call) -> relax.Expr:
        call = super().visit_call_(call)
        if not isinstance(call.op, tvm.ir.Op):
            return call
        positions = _border_args(self.builder_.normalize(call), self.block)
        if not positions:
            return call
        args = list(call.args)
        for i in positions:
            arg = args[i]
            if isinstance(arg.ty, relax.TupleType):
                fields = (arg.fields if isinstance(arg, relax.Tuple)
                          else [relax.TupleGetItem(arg, j) for j in range(len(arg.ty.fields))])
                args[i] = relax.Tuple([self._border(f) for f in fields])
            else:
                args[i] = self._border(arg)
        return relax.Call(call.op, args, call.attrs, call.ty_args, call.span)

    def _border(self, x: relax.Expr) -> relax.Expr:
        if not isinstance(x, relax.Var):  # a constant is never blocked
            return x
        return self.builder_.emit(relax.op.reshape(x, x.ty.shape), x.name)


def _nchw_points(mod: tvm.IRModule, block: int, halves_depthwise: bool = True) -> tuple[int, int]:
    """Where blocks of `block` leave the model in NCHW: (convs kept in NCHW, op inputs brought
    back to NCHW at a border)."""
    choose, kept, borders = _layouts(block, halves_depthwise), 0, 0

    def visit(expr) -> None:
        nonlocal kept, borders
        if isinstance(expr, relax.Call) and isinstance(expr.op, tvm.ir.Op):
            kept += expr.op.name == "relax.nn.conv2d" and choose(expr) is _KEEP
            borders += len(_border_args(expr, block))

    for func in mod.functions.values():
        if isinstance(func, relax.Function):
            relax.analysis.post_order_visit(func, visit)
    return kept, borders


def _blocks_a_conv(mod: tvm.IRModule, choose) -> bool:
    """Whether `choose` puts some conv of `mod` in a blocked layout."""
    found = False

    def visit(expr) -> None:
        nonlocal found
        if isinstance(expr, relax.Call) and isinstance(expr.op, tvm.ir.Op) and expr.op.name == "relax.nn.conv2d":
            found = found or choose(expr) is not _KEEP

    for func in mod.functions.values():
        if isinstance(func, relax.Function):
            relax.analysis.post_order_visit(func, visit)
    return found


def BlockedLayout(block: int, wide: int | None = None) -> tvm.transform.Pass:
    """Conv chains in NCHW{block}c, or in NCHW{wide}c (`pipeline.layout`: a bf16 build's AMX
    convs read 32 channels per tile row) where that leaves no more convs in NCHW and draws no
    more borders (a concat of channels blocked by 32 and by 16 would be one); channels `wide`
    does not divide then take half of it, as with `block`."""
    drop_borders = RemoveNoOps()

    @tvm.transform.module_pass(opt_level=0, name="tvm_fuse.BlockedLayout")
    def blocked_layout(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        chosen = block
        if wide and all(a <= b for a, b in zip(_nchw_points(mod, wide, halves_depthwise=False),
                                                _nchw_points(mod, block))):
            chosen = wide
        choose = _layouts(chosen, chosen == block)
        if not _blocks_a_conv(mod, choose):
            return mod  # nothing to convert (a transformer): ConvertLayout would only risk failing
        borders = _Borders(mod, chosen)
        bordered = mutate_functions(mod, borders, borders.visit_expr)
        try:
            return drop_borders(relax.transform.ConvertLayout({}, choose)(bordered))
        except Exception as error:  # noqa: BLE001 -- a layout rule we have no border for
            cause = str(error).strip().splitlines()[-1] if str(error).strip() else type(error).__name__
            warnings.warn(f"the model runs in NCHW: converting it to NCHW{chosen}c failed ({cause})")
            return mod

    return blocked_layout
