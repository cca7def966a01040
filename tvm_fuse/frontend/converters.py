"""Our own conversions for ONNX ops where TVM's importer gives a form the fusion table cannot
see, or a wrong one. Each takes (builder, inputs, attrs, opset) and returns a Relax expression,
or None to leave the node to TVM's converter."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import tvm
from tvm import relax
from tvm.ir.expr import GenericConst

from ..compute.lrn import local_response_norm
from ..ir_names import KERNEL_ATTR, OP_PATTERN_ATTR, OPAQUE
from .attributes import refuse, text
from .dynamic_quantization import cast, conv_integer, dynamic_quantize_linear, dynamic_quantize_lstm, matmul_integer
from .fixups import same_pads
from .indices import gather, gather_elements, gather_nd, scatter, scatter_elements, scatter_nd
from .recurrent import gru, lstm
from .slicing import slice_
from .spectral import stft


def _bound(value, default: float) -> float | None:
    """A clip bound as a float: None for one computed at run time; NaN means no bound (ORT)."""
    if value is None:
        return default
    if not isinstance(value, GenericConst) or value.value.numpy().size != 1:
        return None
    bound = float(value.value.numpy().reshape(()))
    return default if math.isnan(bound) else bound


def clip(bb, inputs, attrs, opset):
    """`relax.clip`, not TVM's maximum/minimum TIR calls: relu6 is an activation post-op."""
    x = inputs[0]
    if not np.issubdtype(np.dtype(str(x.ty.dtype)), np.floating):
        return None
    if opset < 11:
        low, high = float(attrs.get("min", -math.inf)), float(attrs.get("max", math.inf))
    else:
        low = _bound(inputs[1] if len(inputs) > 1 else None, -math.inf)
        high = _bound(inputs[2] if len(inputs) > 2 else None, math.inf)
    if low is None or high is None:
        return None
    return relax.op.clip(x, low, high)


def prelu(bb, inputs, attrs, opset):
    """Before opset 7, a slope of one dim is per channel (axis 1); TVM takes it for the last axis."""
    x, slope = inputs
    if opset >= 7 or slope.ty.ndim != 1 or x.ty.ndim < 2:
        return None
    return relax.op.nn.prelu(x, slope, axis=1)


def expand(bb, inputs, attrs, opset):
    """Expand to a shape computed at run time: TVM's converter keeps a target dim of 1 where the
    data's is larger (x[1, 3, 1] to [3, 1, 3] gave [3, 1, 3], not [3, 3, 3]). Each output dim
    is the target's, or the data's where the target's is 1 (ONNX's broadcasting)."""
    data, shape = inputs
    if isinstance(shape, GenericConst | relax.ShapeExpr) or not isinstance(shape.ty, relax.TensorType):
        return None  # a constant target: TVM's converter is right
    if shape.ty.shape is None or not isinstance(shape.ty.shape[0], tvm.tirx.IntImm) or data.ty.ndim < 0:
        return None
    rank, length = data.ty.ndim, int(shape.ty.shape[0])
    ndim = max(rank, length)

    def padded(dims, have):  # right-aligned: ones in front
        ones = relax.const(np.ones(ndim - have, np.int64), "int64")
        return dims if have == ndim else bb.emit(relax.op.concat([ones, dims], axis=0))

    data_dims = padded(bb.emit(relax.op.shape_to_tensor(relax.op.shape_of(data))), rank)
    target = padded(bb.emit(relax.op.astype(shape, "int64")), length)
    one = relax.const(1, "int64")
    dims = bb.emit(relax.op.where(relax.op.equal(target, one), data_dims, target))
    as_shape = bb.emit(relax.Call(relax.ExternFunc("vm.builtin.tensor_to_shape"), [dims],
                                  ty_args=[relax.ShapeType(ndim=ndim)]))
    symbols = [tvm.tirx.Var(f"expand_{i}", "int64") for i in range(ndim)]
    bb.match_cast(as_shape, relax.ShapeType(symbols))
    return relax.op.broadcast_to(data, relax.ShapeExpr(symbols))


def sequence_insert(bb, inputs, attrs, opset):
    """A negative position counts from the back as Python's `list.insert` does (ONNX's reference):
    -1 inserts before the last tensor; TVM's converter appended it."""
    if len(inputs) < 3 or not isinstance(inputs[2], GenericConst) or not isinstance(inputs[0], relax.Tuple):
        return None
    tensors = list(inputs[0].fields)
    position = int(inputs[2].value.numpy())
    if not -len(tensors) <= position <= len(tensors):
        raise ValueError(f"SequenceInsert position {position} is outside [-{len(tensors)}, {len(tensors)}]")
    tensors.insert(position, inputs[1])
    return relax.Tuple(tensors)


def squeeze(bb, inputs, attrs, opset):
    """Negative axes made positive: TVM's squeeze layout rule indexes its layout string with
    them, which crashed layout conversion (`std::bad_alloc`) after a conv1d (silero-vad)."""
    x = inputs[0]
    if opset < 13:
        axes = attrs.get("axes")
    else:
        given = inputs[1] if len(inputs) > 1 else None
        axes = given.value.numpy().reshape(-1).tolist() if isinstance(given, GenericConst) else None
    if not axes or x.ty.ndim < 0 or all(int(a) >= 0 for a in axes):
        return None
    return relax.op.squeeze(x, [int(a) % x.ty.ndim for a in axes])


def lrn(bb, inputs, attrs, opset):
    """One kernel (`compute.lrn`) in place of TVM's expanded 3-D average pool, which also pads
    an even `size` on both sides alike and so gave a channel too many. Opaque and marked ours:
    scheduled by its own rule, never fused with TVM's elementwise kernels (an int8 build's
    quantize after it was left unscheduled in their fused kernel) nor rescheduled by the
    generic pass."""
    x = inputs[0]
    if x.ty.ndim < 3 or str(x.ty.dtype) not in ("float32", "float64"):
        return None
    size = int(attrs["size"])
    return bb.call_te(local_response_norm, x, size, float(attrs.get("alpha", 1e-4)), float(attrs.get("beta", 0.75)),
                      float(attrs.get("bias", 1.0)), primfunc_name_hint="lrn",
                      primfunc_attrs={KERNEL_ATTR: "lrn", OP_PATTERN_ATTR: OPAQUE})


def pad(bb, inputs, attrs, opset):
    """A constant Pad with static pads as Relax's `nn.pad`, which `FoldPadIntoConv` can read
    (TVM's converter emits it as a TIR kernel already); a Pad of nothing as its input, as
    exporters write "same" padding for 1x1 convs (EfficientNet: 55 such per run)."""
    if text(attrs.get("mode", b"constant")) != "constant":
        return None
    if opset < 11:
        pads, value = attrs.get("pads"), attrs.get("value", 0.0)
    else:
        if len(inputs) > 3 and inputs[3] is not None:
            return None  # pads of chosen axes (Pad-18): TVM's converter maps them
        given, fill = inputs[1], inputs[2] if len(inputs) > 2 else None
        if not isinstance(given, GenericConst) or not (fill is None or isinstance(fill, GenericConst)):
            return None
        pads = given.value.numpy().reshape(-1).tolist()
        value = 0.0 if fill is None else fill.value.numpy().item()
    x = inputs[0]
    if pads is None or x.ty.ndim != len(pads) // 2 or any(int(p) < 0 for p in pads):
        return None
    if not any(pads):
        return x
    rank = x.ty.ndim
    widths = [int(w) for axis in range(rank) for w in (pads[axis], pads[rank + axis])]
    return relax.op.nn.pad(x, widths, "constant", float(value))


def max_pool_same(bb, inputs, attrs, opset):
    """A 2-D MaxPool of `auto_pad` SAME with a symbolic dim (TVM's converter computes its padding
    in ints, and fails): over static sizes (a symbolic batch), ONNX's padding of them; over
    symbolic sizes, where the padding does not depend on the size: a stride of 1 pads kernel - 1
    (the odd one after for SAME_UPPER, before for SAME_LOWER); SAME_UPPER of a kernel of 2 as
    long as its stride pads at most one, after the last window, which is pooling with `ceil_mode`
    (the padding is -inf to a max). Other padding depends on the size's remainder, which a build
    for every size cannot fix."""
    x = inputs[0]
    mode = text(attrs.get("auto_pad", b"NOTSET"))
    if mode not in ("SAME_UPPER", "SAME_LOWER") or x.ty.shape is None or len(x.ty.shape) != 4 \
            or None not in _static(x.ty.shape, 4) or len(inputs) > 1:
        return None
    kernel = [int(k) for k in attrs["kernel_shape"]]
    strides = [int(s) for s in attrs.get("strides", [1, 1])]
    if any(int(d) != 1 for d in attrs.get("dilations", [1, 1])) or int(attrs.get("storage_order", 0)):
        return None
    sizes = _static(list(x.ty.shape)[2:], 2)
    if None not in sizes:  # only the batch or channels symbolic: ONNX's padding of these sizes
        return relax.op.nn.max_pool2d(x, kernel, strides, same_pads(sizes, kernel, strides, [1, 1], mode))
    if all(s == 1 for s in strides):  # pads kernel - 1 whatever the size: that of a size of 1
        return relax.op.nn.max_pool2d(x, kernel, strides, same_pads([1, 1], kernel, strides, [1, 1], mode))
    if kernel == strides and max(kernel) <= 2 and mode == "SAME_UPPER":  # pads 0 or 1, all after
        return relax.op.nn.max_pool2d(x, kernel, strides, [0, 0, 0, 0], ceil_mode=True)
    raise refuse("MaxPool", attrs, opset, f"{mode} padding over symbolic sizes, which depends on each size's "
                 "remainder by the stride (give input_shapes)")


def _static(dims, rank: int) -> list[int | None]:
    """Each of `rank` dims, None where it is symbolic or the shape is unknown."""
    return [None] * rank if dims is None else [int(d) if isinstance(d, tvm.tirx.IntImm) else None for d in dims]


def resize(bb, inputs, attrs, opset):
    """Where TVM's resize differs from ONNX's, refused; to the input's own size, the input.
    TVM maps output to input coordinates by the ratio of their sizes, ONNX by the scales given:
    they differ where an input size times its scale is not a whole number (a 2x3 image scaled by
    0.5 to 1x1), and with symbolic sizes unless every scale is whole. TVM divides by zero for an
    align_corners output of size 1."""
    x = inputs[0]
    scales = inputs[2] if opset >= 11 and len(inputs) > 2 else inputs[1] if opset == 10 else None
    if isinstance(scales, GenericConst) and scales.value.numpy().size:
        factors = scales.value.numpy().tolist()
        sizes = _static(x.ty.shape, len(factors))
        for axis, (size, factor) in enumerate(zip(sizes, factors)):
            exact = size * factor == int(size * factor) if size is not None else float(factor).is_integer()
            if not exact:
                shown = size if size is not None else "unknown" if x.ty.shape is None else x.ty.shape[axis]
                raise refuse("Resize", attrs, opset, f"scale {factor} of axis {axis} (size {shown}) gives a "
                             "fractional size, where ONNX's coordinates differ from TVM's")
        out = [None if size is None else int(size * factor) for size, factor in zip(sizes, factors)]
    elif opset >= 11 and len(inputs) > 3 and isinstance(inputs[3], GenericConst):
        out = [int(v) for v in inputs[3].value.numpy().tolist()]
        sizes = _static(x.ty.shape, len(out))
    elif opset >= 11 and len(inputs) > 3 and inputs[3] is not None:
        return _resize_to_symbolic_sizes(x, inputs[3], attrs, opset)
    else:
        return None
    mode = text(attrs.get("coordinate_transformation_mode", b"half_pixel"))
    if None not in out and out == sizes and mode not in ("tf_half_pixel_for_nn", "tf_crop_and_resize"):
        return x  # every mapping is the identity at the same size
    if mode == "align_corners" and any(o == 1 for o in out[2:]):  # also 1 -> 1 beside an axis that changes
        raise refuse("Resize", attrs, opset, "align_corners to an output of size 1 (TVM divides by zero)")
    if text(attrs.get("mode", b"nearest")) == "nearest":
        rounding = text(attrs.get("nearest_mode", b"round_prefer_floor"))
        # ONNX Runtime copies an axis of unchanged size; TVM maps it to x + 0.5, which these round up.
        if mode == "tf_half_pixel_for_nn" and rounding in ("ceil", "round_prefer_ceil") \
                and any(o is not None and o == i for o, i in zip(out[2:], sizes[2:])):
            raise refuse("Resize", attrs, opset, f"nearest {rounding} with {mode} on an axis whose size it keeps")
        axis = _tied_axis(mode, rounding, sizes[2:], out[2:])
        if axis is not None:
            raise refuse("Resize", attrs, opset, f"nearest {rounding} with {mode}: output pixels of axis {axis + 2} "
                         "lie halfway between two input pixels, where TVM's rounded ratio of sizes picks "
                         "either side")
    return None


def _resize_to_symbolic_sizes(x, sizes, attrs, opset):
    """A Resize to `sizes` computed from symbolic dims (torch's `interpolate(x, size=y.shape[2:])`):
    ONNX's scale is then the ratio of sizes, which is how TVM maps coordinates. Linear and cubic
    modes of half-pixel coordinates (torch's `align_corners=False`) only: nearest's ties, which
    that ratio's rounding may break either way, cannot be checked for sizes unknown at build
    time."""
    where = "sizes computed at run time (give input_shapes)"
    if not isinstance(sizes, relax.ShapeExpr) or x.ty.shape is None or len(x.ty.shape) != 4:
        raise refuse("Resize", attrs, opset, f"{where}, other than a 4-D input's from symbolic dims")
    mode = text(attrs.get("mode", b"nearest"))
    if mode == "nearest":
        raise refuse("Resize", attrs, opset, f"nearest to {where}: ONNX's ties cannot be checked")
    analyzer = tvm.sym.Analyzer()
    if not all(analyzer.can_prove_equal(a, b) for a, b in zip(list(sizes.values)[:2], list(x.ty.shape)[:2])):
        raise refuse("Resize", attrs, opset, f"{where} of the batch or channel axes")
    coordinates = text(attrs.get("coordinate_transformation_mode", b"half_pixel"))
    if coordinates not in ("half_pixel", "pytorch_half_pixel"):  # TVM fails to compile the others' kernels
        raise refuse("Resize", attrs, opset, f"{coordinates} to {where}")
    return relax.op.image.resize2d(
        x, size=relax.ShapeExpr(list(sizes.values)[2:]), layout="NCHW", method=mode,
        coordinate_transformation_mode=coordinates, cubic_alpha=float(attrs.get("cubic_coeff_a", -0.75)),
        cubic_exclude=int(attrs.get("exclude_outside", 0)))


def _tied_axis(mode: str, rounding: str, sizes: list, out: list) -> int | None:
    """The first spatial axis on which a nearest Resize maps an output pixel exactly halfway
    between two input pixels (ONNX's coordinate, in exact arithmetic) while TVM, which scales by
    the ratio of sizes in float32, cannot compute it exactly (the ratio's denominator is not a
    power of two; align_corners scales by (size - 1) / (length - 1), so it is checked too): there
    TVM's rounding error decides the tie, and it may pick the other pixel."""
    half = Fraction(1, 2)
    # ONNX's input coordinate of output pixel x as (x + before) * ratio - after, by mode.
    shifts = {"half_pixel": (half, half), "pytorch_half_pixel": (half, half), "asymmetric": (0, 0),
              "tf_half_pixel_for_nn": (half, 0), "align_corners": (0, 0)}
    if rounding not in ("round_prefer_floor", "round_prefer_ceil") or mode not in shifts:
        return None
    before, after = shifts[mode]
    for axis, (size, length) in enumerate(zip(sizes, out)):
        if size is None or length is None or size == length:
            continue
        ratios = [Fraction(size, length)]
        if mode == "align_corners":
            ratios.append(Fraction(size - 1, length - 1))  # length 1 is refused before
        if all(r.denominator & (r.denominator - 1) == 0 for r in ratios):  # exact in float32: ties as ONNX's
            continue
        ratio = ratios[-1]
        for x in range(length):
            coordinate = (x + before) * ratio - after
            if coordinate - math.floor(coordinate) == half:
                return axis
    return None


CONVERTERS = {
    "Cast": cast,
    "Clip": clip,
    "ConvInteger": conv_integer,
    "DynamicQuantizeLinear": dynamic_quantize_linear,
    "DynamicQuantizeLSTM": dynamic_quantize_lstm,
    "Expand": expand,
    "Gather": gather,
    "GatherElements": gather_elements,
    "GatherND": gather_nd,
    "GRU": gru,
    "LRN": lrn,
    "LSTM": lstm,
    "MatMulInteger": matmul_integer,
    "MaxPool": max_pool_same,
    "Pad": pad,
    "PRelu": prelu,
    "Resize": resize,
    "Scatter": scatter,
    "ScatterElements": scatter_elements,
    "ScatterND": scatter_nd,
    "SequenceInsert": sequence_insert,
    "Squeeze": squeeze,
    "Slice": slice_,
    "STFT": stft,
}
# Ops of ONNX Runtime's com.microsoft domain that CONVERTERS convert.
MICROSOFT_OPS = frozenset({"DynamicQuantizeLSTM"})
