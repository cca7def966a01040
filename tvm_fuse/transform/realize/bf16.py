"""Run conv and dense kernels in bf16 (`build(precision="bf16")`).

Each composite whose anchor is a blocked (NCHW{c}c) conv or a dense layer with constant weights
becomes ONE bf16 kernel: its weights rounded to bf16 and packed in pairs along the reduction
here, at build time (`compute.bf16`), its fp32 input rounded to bf16 as the kernel reads it (a
conv's as it pads it; an RGB stem's 3 channels read as 4), the products summed in fp32, and
the composite's post-ops applied in fp32 to the accumulators. A 3x3 conv that Winograd takes
in fp32 runs as a bf16 Winograd conv with the same tile, as does one of 256 output channels or
more from 7x7 (`compute.winograd_nchwc_bf16`: its transforms in fp32, the transformed input
and weights rounded to bf16 for the product). A batch norm + ReLU before a conv, read by
nothing else (DenseNet's pre-activation), is applied by the conv as it rounds its input
(`_prologue`).

A kernel whose every reader takes bf16 writes bf16 (as bits, `compute.bf16`): a bf16 kernel
takes it as its data without a rounding pass, or widens it exactly as an epilogue operand (a
residual); a depthwise conv (fp32 arithmetic) widens it as it pads it, and writes bf16 itself
where its readers take it; a concat of bf16 tensors moves them as they are, and a max-pool
compares them as fp32 and writes bf16 (a stem's 112x112x64 output: half the bytes). Any other
output is fp32, so what reads it is unchanged. A stem reads the network's NCHW image itself,
blocking it as it reads it (`_blocked_view`).

On a target with AMX-BF16, a dense layer whose reduction is a multiple of 32 and whose columns
a multiple of 16 computes on the matrix engine's tiles (`tdpbf16ps`, `schedules.amx.dense`),
and so does a conv in output blocks of 16 (`schedules.amx.conv`, 3x3s included, which
Winograd would otherwise take), with the same weight packing; other shapes stay on `vdpbf16ps`.
Its convs' blocks of 32 (`pipeline.layout`) are the tiles' alone: their weights packed in
blocks of 16, a B tile's (`conv.split_output_blocks`).

Left in fp32: dense layers whose columns the vector width does not divide or whose reduction is
odd, depthwise convs' arithmetic (bound by memory: halving their products gains nothing), convs
in blocks of 32 that tiles cannot take (an RGB 1x1 stem: too few channels for a tile row).
Attention's products of two activations run in bf16 in its own kernel (`FuseAttention`, told
by the pipeline that the build is bf16).
"""

from __future__ import annotations

import functools
import warnings

import numpy as np
import tvm
from tvm import relax, te, tirx, topi
from tvm.ir.expr import GenericConst
from tvm.relax.expr_functor import PyExprMutator, mutator

from ... import provenance
from ...amx import AMX_COLUMNS, fits_amx
from ...compute.bf16 import BITS, PAIR, from_bits_tensor, pack_dense_pairs, pack_pairs, to_bits, to_bits_tensor
from ...compute.conv import fold_row_taps, split_output_blocks
from ...compute.conv_nchwc_bf16 import BF16_OUT_BLOCKS, conv2d_nchwc_bf16
from ...compute.dense_bf16 import dense_packed_bf16
from ...compute.matmul import pack_dense_weight
from ...compute.winograd_nchwc_bf16 import (
    BF16_TILE_BY_OUTPUT_SIDE,
    BF16_WIDE_CHANNELS,
    BF16_WIDE_TILE_BY_OUTPUT_SIDE,
    conv2d_winograd_nchwc_bf16,
    transform_weight_bf16,
)
from ...errors import InputError
from ...ir_names import PATTERN_ATTR
from ...patterns.table import composite_of
from ...target import isa_features, target_string, vector_lanes
from ..lower_composites import (
    anchor_compute,
    composite_compute,
    kernel_call,
    winograd_enabled,
    winograd_tile,
)
from ..relax_helpers import blocked_from_nchw, is_op, mutate_functions, read_only_by, readers, same_type
from .composite import TileLayout, anchor_of, conv_tile_layout, largest_set

BF16_ATTR = "tvm_fuse.bf16"  # kernel attribute: its products run in bf16


def RealizeBf16(lanes: int = 16, native: bool = True, amx: bool = False) -> tvm.transform.Pass:
    """`lanes`: the target's fp32 vector width, the block dense weights are packed in.
    `native`: tensorize with `vdpbf16ps` (the target has AVX512-BF16), else its portable form.
    `amx`: dense layers and convs whose shape fits AMX tiles run on them (`tdpbf16ps`; the
    target has AMX-BF16), the others on `vdpbf16ps` as without it."""

    @tvm.transform.module_pass(opt_level=0, name="tvm_fuse.RealizeBf16")
    def realize(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        realizer = _Realizer(mod, lanes, native, amx)

        def realized(func: relax.Function) -> relax.Function | None:
            if PATTERN_ATTR in (func.attrs or {}):
                return None
            realizer.bits = _bits_outputs(mod, func, lanes, native, amx)
            realizer.reads = readers(func)
            realizer.values = {b.var: b.value for block in func.body.blocks for b in block.bindings}
            return realizer.visit_expr(func)

        updated = mutate_functions(mod, realizer, realized)
        return relax.transform.DeadCodeElimination()(updated)

    return realize


def bf16_anchor(func: relax.Function, args, lanes: int, native: bool, amx: bool = False):
    """(the weight's parameter position, a function that packs it for bf16, the anchor's bf16
    compute, the kernel's name prefix) if composite `func`, called on `args`, runs as a bf16
    kernel; else None. The packing is deferred: `_bf16_kernels` only asks whether there is
    one. `amx`: a dense layer or conv that fits AMX tiles computes on them (the same packing);
    such a 3x3 conv is never left to Winograd, whose fewer products cannot match the tiles' rate."""
    found = anchor_of(func)
    anchor, position = found.call, found.weight
    weight = args[position] if position is not None else None
    if not isinstance(weight, GenericConst):
        return None
    if anchor.op.name == "relax.matmul":
        k, n = (int(d) for d in weight.ty.shape) if weight.ty.ndim == 2 else (1, 1)
        if weight.ty.ndim != 2 or k % PAIR or n % lanes:
            return None
        tiles = amx and fits_amx(k, 2, lanes)  # bf16: 2 bytes
        return position, lambda: pack_dense_pairs(pack_dense_weight(weight.value.numpy(), lanes)), \
            lambda _call, data, packed_weight: dense_packed_bf16(data, packed_weight, native, amx=tiles), "bf16_"
    if anchor.op.name != "relax.nn.conv2d" or weight.ty.ndim != 6:
        return None
    attrs = anchor.attrs
    in_block, out_block = (int(weight.ty.shape[axis]) for axis in (4, 5))
    if int(attrs.groups) != 1 or (in_block % PAIR and int(weight.ty.shape[1]) != 1):
        return None
    kernel_w = int(weight.ty.shape[3])
    geometry = [[int(v) for v in values] for values in (attrs.strides, attrs.padding, attrs.dilation)]
    layout = conv_tile_layout(found, in_block, 2, int(weight.ty.shape[1]), weight.ty, amx)
    if layout is None and out_block not in BF16_OUT_BLOCKS:  # wide blocks are the tiles' alone
        return None
    tiles, layout = layout is not None, layout or TileLayout()
    tile_block = min(out_block, AMX_COLUMNS)  # the packed weight's output block: at most a B tile's columns

    def packed() -> np.ndarray:
        return split_output_blocks(pack_pairs(layout.arrange(weight.value.numpy())), tile_block)

    if layout.fold:
        def folded_conv(_call, data, packed_weight):
            folded, *folded_geometry = fold_row_taps(data, kernel_w, *geometry)
            return conv2d_nchwc_bf16(folded, packed_weight, *folded_geometry, native, amx=True, out_block=out_block)

        return position, packed, folded_conv, "bf16_"
    out_channels = int(weight.ty.shape[0]) * out_block
    table = BF16_WIDE_TILE_BY_OUTPUT_SIDE if out_channels >= BF16_WIDE_CHANNELS else BF16_TILE_BY_OUTPUT_SIDE
    tile = winograd_tile(anchor, table) if winograd_enabled() and not tiles and not in_block % PAIR else None
    if tile is not None:
        return position, lambda: transform_weight_bf16(weight.value.numpy(), tile), \
            lambda _call, data, packed_weight: conv2d_winograd_nchwc_bf16(data, packed_weight, geometry[1], tile,
                                                                          native), f"bf16_winograd{tile}_"
    return position, packed, lambda _call, data, packed_weight: \
        conv2d_nchwc_bf16(data, packed_weight, *geometry, native, amx=tiles, out_block=out_block), "bf16_"


def _bf16_kernels(mod: tvm.IRModule, func: relax.Function, lanes: int, native: bool, amx: bool) -> set[relax.Var]:
    """The bindings of `func` that become bf16 kernels."""
    return {b.var for block in func.body.blocks for b in block.bindings
            if isinstance(b.value, relax.Call) and (composite := composite_of(mod, b.value)) is not None
            and bf16_anchor(composite, list(b.value.args), lanes, native, amx) is not None}


def blocked_depthwise(func: relax.Function) -> bool:
    """Whether composite `func`'s anchor is a depthwise conv in a blocked layout: an fp32 kernel
    that may read and write bf16 (widened as its padding reads it, rounded as it writes)."""
    anchor = anchor_of(func)
    return anchor.is_depthwise_conv() and str(anchor.call.attrs.data_layout) not in ("NCW", "NCHW")


def _bits_outputs(mod: tvm.IRModule, func: relax.Function, lanes: int, native: bool, amx: bool) -> set[relax.Var]:
    """The bindings of `func` that write bf16: bf16 kernels, blocked depthwise convs, and
    concats and max-pools (of bf16 tensors only) whose every reader takes bf16: a depthwise
    conv, a concat or max-pool that writes bf16, or a bf16 kernel, as its anchor's data (read
    nowhere else in its composite) or as an epilogue operand. The largest such set: a concat
    or pool drops out with any of its inputs, and each drop may drop its producers."""
    kernels = _bf16_kernels(mod, func, lanes, native, amx)
    bindings = [b for block in func.body.blocks for b in block.bindings if isinstance(b.value, relax.Call)]
    depthwise = {b.var for b in bindings
                 if (composite := composite_of(mod, b.value)) is not None and blocked_depthwise(composite)}
    moves = {b.var: list(b.value.args[0].fields) for b in bindings  # their inputs, which they move as they are
             if is_op(b.value, "relax.concat") and isinstance(b.value.args[0], relax.Tuple)}
    moves.update({b.var: [b.value.args[0]] for b in bindings if is_op(b.value, "relax.nn.max_pool2d")
                  and str(b.value.attrs.layout) == str(b.value.attrs.out_layout)
                  and str(b.value.attrs.layout).startswith("NCHW") and _pool_taps(b.value.attrs) <= MAX_POOL_TAPS})
    found = readers(func)

    def takes_bits(reader: relax.VarBinding | None, var: relax.Var, writing: set[relax.Var]) -> bool:
        if reader is not None and (reader.var in depthwise or reader.var in moves and reader.var in writing):
            return True
        if reader is None or reader.var not in kernels:
            return False
        composite = composite_of(mod, reader.value)
        data = anchor_of(composite).call.args[0]
        reads = readers(composite)
        params = [p for p, arg in zip(composite.params, reader.value.args) if arg.same_as(var)]
        return all(len(reads.get(p, [])) == 1 for p in params if p.same_as(data))

    def keeps_bits(var: relax.Var, writing: set) -> bool:
        return all(takes_bits(r, var, writing) for r in found.get(var, [None])) \
            and all(field in writing for field in moves.get(var, []))

    return largest_set(kernels | depthwise | set(moves), keeps_bits)


# Elementwise steps a bf16 conv applies to its input as it reads it (`_prologue`).
_PROLOGUE_OPS = {"relax.multiply": topi.multiply, "relax.add": topi.add, "relax.nn.relu": topi.nn.relu}


def _prologue(data: relax.Expr, values: dict, reads: dict, conv: relax.Var) -> list[tuple[relax.Var, relax.Call]]:
    """The steps that make a conv's `data` from a tensor, first to last: multiplies and adds by
    constants of the tensor's shape or broadcast to it (per channel) and ReLUs, each read only
    by the next and the last only by the conv (the binding `conv`): a pre-activation batch norm
    + ReLU (DenseNet's before each conv, on the concat of the layers before), which the bf16
    conv applies as it rounds its input to bf16 instead of a kernel of its own that writes
    the normalized tensor in fp32 for the conv to read. Each step as (its variable, its call);
    [] if `data` is not so made."""
    steps, var, reader = [], data, conv
    while isinstance(var, relax.Var) and var in values and read_only_by(reads, var, reader):
        step = values[var]
        if not (isinstance(step, relax.Call) and isinstance(step.op, tvm.ir.Op) and step.op.name in _PROLOGUE_OPS):
            break
        source, *constants = step.args
        if not isinstance(source, relax.Var) or not same_type(step, source) \
                or not all(isinstance(c, GenericConst) for c in constants):
            break
        steps.append((var, step))
        var, reader = source, var
    return steps[::-1]


def _sole_blocked_input(data: relax.Expr, values: dict, reads: dict, conv: relax.Var) -> relax.Expr | None:
    """x where the conv's `data` is layout_transform(x) from NCHW to NCHW{c}c (the network's
    image, blocked for its stem) read by the conv (the binding `conv`) alone: the conv then
    reads x, in one pass fewer over the image."""
    if not isinstance(data, relax.Var) or not read_only_by(reads, data, conv):
        return None
    return blocked_from_nchw(values.get(data))


def _blocked_view(image: te.Tensor, block: int) -> te.Tensor:
    """NCHW `image` as NCHW{block}c, read in place (inlined into the pass that reads it)."""
    batch, channels, height, width = image.shape
    return te.compute((batch, channels // block, height, width, block),
                      lambda n, chunk, y, x, lane: image[n, chunk * block + lane, y, x], name="blocked")


@mutator
class _Realizer(PyExprMutator):
    def __init__(self, mod: tvm.IRModule, lanes: int, native: bool, amx: bool):
        super().__init__(mod)
        self.mod = mod
        self.lanes = lanes
        self.native = native
        self.amx = amx
        self.bits: set[relax.Var] = set()  # bindings whose kernels write bf16 bits

    def visit_var_binding_(self, binding: relax.VarBinding) -> None:
        self.binding = binding.var
        super().visit_var_binding_(binding)

    def visit_call_(self, call: relax.Call) -> relax.Expr:
        if is_op(call, "relax.concat") and self.binding in self.bits:  # moves bf16 as it is
            return self.builder_.normalize(relax.Call(call.op, [self.visit_expr(call.args[0])], call.attrs))
        if is_op(call, "relax.nn.max_pool2d") and self.binding in self.bits:
            return self.builder_.call_te(_max_pool_bits, self.visit_expr(call.args[0]), call.attrs,
                                         list(call.ty.shape), primfunc_name_hint="max_pool2d")
        func = composite_of(self.mod, call)
        found = bf16_anchor(func, list(call.args), self.lanes, self.native, self.amx) if func is not None else None
        if found is None:
            if func is not None and blocked_depthwise(func):
                return self._depthwise(func, call)
            return super().visit_call_(call)
        # Not rebuilt as a call of the composite: an argument may now be bf16, which it does not take.
        args = [self.visit_expr(a) for a in call.args]
        position, pack, bf16_compute, prefix = found
        args[position] = relax.const(pack())
        anchor = anchor_of(func)
        operands = anchor.call.args[:2]  # the anchor's data and weight

        def widened(param: relax.Var, tensor):
            """bf16 bits stay bits for the anchor, and are read as fp32 in the epilogue."""
            return tensor if tensor.dtype != BITS or any(param.same_as(o) for o in operands) \
                else from_bits_tensor(tensor)

        data = anchor.data
        steps = _prologue(call.args[data], self.values, self.reads, self.binding) \
            if anchor.op == "relax.nn.conv2d" else []
        if steps:  # the conv reads the steps' input and applies them as it rounds it
            args[data] = self.visit_expr(steps[0][1].args[0])
            args += [a for _, step in steps for a in step.args[1:]]
        image = None if steps else _sole_blocked_input(call.args[data], self.values, self.reads, self.binding)
        if image is not None:  # the stem reads the network's NCHW input, blocking it as it reads it
            args[data] = self.visit_expr(image)
        composite = composite_compute(func.body, list(func.params), bf16_compute, widened)

        def real(*tensors):
            operands_in, constants = list(tensors[:len(func.params)]), iter(tensors[len(func.params):])
            if image is not None:
                operands_in[data] = _blocked_view(operands_in[data], int(call.args[data].ty.shape[-1]))
            if steps:
                value = operands_in[data]
                value = from_bits_tensor(value) if value.dtype == BITS else value
                for _, step in steps:
                    value = _PROLOGUE_OPS[step.op.name](value, *(next(constants) for _ in step.args[1:]))
                operands_in[data] = value
            return composite(*operands_in)

        nodes = {n for var, step in steps for n in [provenance.node_index(var), *provenance.span_nodes(step)]}
        nodes.discard(None)
        return self._kernel(func, real, args, prefix, {BF16_ATTR: True}, nodes)

    def _depthwise(self, func: relax.Function, call: relax.Call) -> relax.Expr:
        """A depthwise conv kernel in fp32 that widens any bf16 input and writes bf16 where its
        readers take it; left to `LowerComposites` when it does neither."""
        args = [self.visit_expr(a) for a in call.args]
        if self.binding not in self.bits and all(str(a.ty.dtype) != BITS for a in args):
            return self.builder_.normalize(relax.Call(call.op, args, call.attrs))
        real = composite_compute(func.body, list(func.params), anchor_compute,
                                 lambda _param, tensor: from_bits_tensor(tensor) if tensor.dtype == BITS else tensor)
        return self._kernel(func, real, args)

    def _kernel(self, func: relax.Function, real, args, prefix: str = "", attrs: dict | None = None,
                nodes=()) -> relax.Expr:
        """The kernel computing `real`, rounding its output to bf16 if the binding writes bf16;
        `nodes`: ONNX nodes it computes besides the composite's."""
        compute = (lambda *tensors: to_bits_tensor(real(*tensors))) if self.binding in self.bits else real
        return self.builder_.normalize(kernel_call(self.builder_, func, compute, args, prefix, attrs, nodes))


MAX_POOL_TAPS = 64  # a bf16 max-pool's window, written out as one expression (`_max_pool_bits`)


def _pool_taps(attrs) -> int:
    return int(attrs.pool_size[0]) * int(attrs.pool_size[1])


def _max_pool_bits(bits: te.Tensor, attrs, shape: list) -> te.Tensor:
    """A max-pool (NCHW or NCHW{c}c) of bf16 bits into `shape`, compared as the fp32 values
    they are: the max of rounded values is the rounded max (rounding keeps order), so the
    pool's readers, which round its input, read what they read from the fp32 pool."""
    (kernel_h, kernel_w), (stride_h, stride_w), (dilation_h, dilation_w) = \
        ([int(v) for v in values] for values in (attrs.pool_size, attrs.strides, attrs.dilation))
    top, left, *_ = (int(v) for v in attrs.padding)
    height, width = (int(extent) for extent in shape[2:4])  # the batch may be a run-time count
    # Padded to the last window (ceil mode's included) with -inf, which no window's max takes.
    bottom = (height - 1) * stride_h + (kernel_h - 1) * dilation_h + 1 - int(bits.shape[2]) - top
    right = (width - 1) * stride_w + (kernel_w - 1) * dilation_w + 1 - int(bits.shape[3]) - left
    rest = [0] * (len(bits.shape) - 4)
    padded = topi.nn.pad(from_bits_tensor(bits), [0, 0, top, left, *rest], [0, 0, max(bottom, 0), max(right, 0), *rest],
                         pad_value=-float("inf"), name="pad")

    def value(n, c, y, x, *lane):  # the window's max as one expression: one pass, widened as it reads
        taps = [padded[(n, c, y * stride_h + ky * dilation_h, x * stride_w + kx * dilation_w, *lane)]
                for ky in range(kernel_h) for kx in range(kernel_w)]
        return to_bits(functools.reduce(tirx.max, taps))

    return te.compute(shape, value, name="pool_max")


PRECISIONS = ("fp32", "bf16")


def bf16_pass(precision: str, target: tvm.target.Target) -> tvm.transform.Pass | None:
    """`RealizeBf16` for a bf16 build on a target with AVX512-BF16 (its dense layers on AMX
    tiles where it also has AMX-BF16); None for fp32, and (with a warning) for a target
    without AVX512-BF16, which builds in fp32."""
    if precision not in PRECISIONS:
        raise InputError(f"precision must be one of {', '.join(PRECISIONS)}, not {precision!r}")
    if precision == "fp32":
        return None
    if "avx512_bf16" not in isa_features(target):
        warnings.warn(f"bf16 kernels need AVX512-BF16; {target_string(target)} builds in fp32")
        return None
    return RealizeBf16(vector_lanes(target), amx="amx_bf16" in isa_features(target))
