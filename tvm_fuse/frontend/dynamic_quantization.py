"""ONNX Runtime's dynamic quantization (`quantize_dynamic`): DynamicQuantizeLinear, ConvInteger,
MatMulInteger and com.microsoft.DynamicQuantizeLSTM, computed as ONNX Runtime computes them.

A dynamically quantized tensor takes its scale and zero point from its own range at run time
(`quantization_parameters`), as ONNX Runtime's kernels do, including its scale of 1 for a tensor
of zeros (ONNX's formula divides by a scale of 0 there, and TVM's converter gave NaN). Integer
products run as float32 products of the same integers, the codes minus their zero points: each
is exact, and so is every sum below 2^24, past which ONNX Runtime's own cast of the int32 sum to
float rounds alike. So a convolution keeps its float kernels and layouts, and the Cast of an
int32 product back to float32 is the product itself. A dense product of u8 codes and s8 weight
codes is left in that form (codes less their zero point, as float32, times integer weights) for
`transform.realize.integer_products` to run on an int8 kernel.
"""

from __future__ import annotations

import numpy as np
import onnx
import tvm
from tvm import relax
from tvm.ir.expr import GenericConst
from tvm.relax.frontend.onnx.onnx_frontend import _get_convert_map

from ..compute.requantize import U8_MAX, holds_integers
from .recurrent import lstm

_FLOAT = "float32"


def _scalar(value: float):
    return relax.const(value, _FLOAT)


def quantization_parameters(bb, x):
    """ONNX Runtime's uint8 scale and zero point (as float32 scalars) for the values of `x`:
    the range of `x` widened to hold 0, over 255 codes; a scale of 1 where that range is 0."""
    zero = _scalar(0.0)
    low = bb.emit(relax.op.minimum(relax.op.min(x), zero))
    high = bb.emit(relax.op.maximum(relax.op.max(x), zero))
    width = relax.op.subtract(high, low)
    scale = bb.emit(relax.op.where(relax.op.equal(width, zero), _scalar(1.0), relax.op.divide(width, _scalar(U8_MAX))))
    zero_point = bb.emit(relax.op.round(relax.op.clip(relax.op.negative(relax.op.divide(low, scale)), 0.0, float(U8_MAX))))
    return scale, zero_point


def _codes(x, scale, zero_point):
    """The uint8 codes of `x` as float32 integers: round half to even, then saturate."""
    return relax.op.clip(relax.op.add(relax.op.round(relax.op.divide(x, scale)), zero_point), 0.0, float(U8_MAX))


def fake_quantized(bb, x):
    """`x` quantized to uint8 with its own dynamic parameters and read back as float32:
    scale * (code - zero point), what ONNX Runtime's integer products see of `x`."""
    scale, zero_point = quantization_parameters(bb, x)
    return bb.emit(relax.op.multiply(relax.op.subtract(_codes(x, scale, zero_point), zero_point), scale))


def dynamic_quantize_linear(bb, inputs, attrs, opset):
    """ONNX DynamicQuantizeLinear: (y uint8, y_scale, y_zero_point uint8)."""
    x = inputs[0]
    if str(x.ty.dtype) != _FLOAT:
        return None
    scale, zero_point = quantization_parameters(bb, x)
    codes = bb.emit(relax.op.astype(_codes(x, scale, zero_point), "uint8"))
    return relax.Tuple([codes, scale, bb.emit(relax.op.astype(zero_point, "uint8"))])


def _as_float(bb, value):
    """`value` as float32: a constant in numpy (TVM's FoldConstant leaves a scalar's astype)."""
    if isinstance(value, GenericConst):
        return relax.const(value.value.numpy().astype(_FLOAT))
    return bb.emit(relax.op.astype(value, _FLOAT))


def _constants(*values) -> list[np.ndarray] | None:
    """The arrays of `values` (None passes as None) if all are constants, else None."""
    if not all(v is None or isinstance(v, GenericConst) for v in values):
        return None
    return [None if v is None else v.value.numpy() for v in values]


def _centred(bb, codes, zero_point, per_channel_axis: int | None = None):
    """`codes` minus `zero_point` as float32 (exact: integers below 2^9). A zero point of one
    value per channel lies along `per_channel_axis`. Constants are computed in numpy: TVM's
    FoldConstant compiles a kernel for each op it folds."""
    shape = None
    if zero_point is not None and zero_point.ty.ndim == 1 and per_channel_axis is not None:
        shape = [1] * codes.ty.ndim
        shape[per_channel_axis] = -1
    arrays = _constants(codes, zero_point)
    if arrays is not None:
        values, offset = arrays
        values = values.astype(_FLOAT)
        if offset is not None:
            values = values - (offset.reshape(shape) if shape else offset).astype(_FLOAT)
        return relax.const(values)
    values = _as_float(bb, codes)
    if zero_point is None:
        return values
    offset = _as_float(bb, zero_point)
    if shape:
        offset = bb.emit(relax.op.reshape(offset, shape))
    return bb.emit(relax.op.subtract(values, offset))


def conv_integer(bb, inputs, attrs, opset):
    """ONNX ConvInteger: the int32 convolution of (x - x_zero_point) with (w - w_zero_point),
    a zero point per output channel or one. Padding reads x's zero point (a real 0), as
    ONNX Runtime pads."""
    x, w, x_zero_point, w_zero_point = (list(inputs) + [None] * 4)[:4]
    data = _centred(bb, x, x_zero_point)
    weight = _centred(bb, w, w_zero_point, per_channel_axis=0)
    conv = _get_convert_map()["Conv"].get_converter(11)(bb, [data, weight, None], dict(attrs), [{}, {}])
    return _as_int32(conv)


def matmul_integer(bb, inputs, attrs, opset):
    """ONNX MatMulInteger: the int32 product of (a - a_zero_point) and (b - b_zero_point), a zero
    point per row of a, per column of b, or one. TVM's converter multiplies in int32, a kernel
    no schedule of ours takes (350 ms for ddddocr's classifier, a dense kernel's 2)."""
    a, b, a_zero_point, b_zero_point = (list(inputs) + [None] * 4)[:4]
    if a_zero_point is not None and a_zero_point.ty.ndim > 1 or b_zero_point is not None and b_zero_point.ty.ndim > 1:
        return None  # zero points of stacked matrices: TVM's converter
    product = relax.op.matmul(_centred(bb, a, a_zero_point, per_channel_axis=-2),
                              _centred(bb, b, b_zero_point, per_channel_axis=-1))
    return _as_int32(product)


def _as_int32(product):
    """An integer product computed in float32 as ONNX's int32: rounded, not truncated, so that
    a sum past 2^24, which float32 rounds, lands on the nearest integer to it."""
    return relax.op.astype(relax.op.round(product), "int32")


_INTEGER_PRODUCTS = ("relax.nn.conv1d", "relax.nn.conv2d", "relax.matmul")


def _integer_valued(bb, expr) -> bool:
    """Whether float32 `expr` holds integers by its construction: codes as floats, minus zero
    points, and ConvInteger's and MatMulInteger's products of them (exact below 2^24)."""
    if isinstance(expr, GenericConst):
        return holds_integers(expr.value.numpy())
    value = bb.lookup_binding(expr) if isinstance(expr, relax.Var) else None
    if not isinstance(value, relax.Call) or not isinstance(value.op, tvm.ir.Op):
        return False
    if value.op.name == "relax.astype":
        return np.dtype(str(value.args[0].ty.dtype)).kind in "iu"
    if value.op.name in ("relax.subtract", "relax.reshape", *_INTEGER_PRODUCTS):
        return all(_integer_valued(bb, arg) for arg in value.args if isinstance(arg.ty, relax.TensorType))
    return False


def _bound_call(bb, expr, op: str) -> relax.Call | None:
    """The call of `op` that variable `expr` is bound to, if it is one."""
    value = bb.lookup_binding(expr) if isinstance(expr, relax.Var) else None
    return value if isinstance(value, relax.Call) and value.op == tvm.ir.Op.get(op) else None


def cast(bb, inputs, attrs, opset):
    """A Cast to float32 of ConvInteger's or MatMulInteger's int32 product as the float32 product
    it was computed as: no round trip through int32 between the kernel and its epilogue. A Cast
    of a shape to int64 (torch's `size=y.shape[2:]`) as the shape."""
    x = inputs[0]
    if isinstance(x, relax.ShapeExpr) and int(attrs.get("to", 0)) == onnx.TensorProto.INT64:
        return x  # int64 already: as a tensor (TVM's converter), Concat and Resize could not read it
    if int(attrs.get("to", 0)) != onnx.TensorProto.FLOAT or not isinstance(x, relax.Var):
        return None
    source = _bound_call(bb, x, "relax.astype")
    if source is None or str(x.ty.dtype) != "int32":
        return None
    rounded = _bound_call(bb, source.args[0], "relax.round")
    if rounded is None:
        return None
    product = rounded.args[0]
    inner = bb.lookup_binding(product) if isinstance(product, relax.Var) else None
    if not (isinstance(inner, relax.Call) and isinstance(inner.op, tvm.ir.Op) and inner.op.name in _INTEGER_PRODUCTS
            and _integer_valued(bb, product)):
        return None
    return product


def _dequantized(bb, codes, scale, zero_point):
    """DynamicQuantizeLSTM's weights [directions, rows, 4 * hidden] as ONNX LSTM's float
    [directions, 4 * hidden, rows]: scale * (code - zero point), a scale and zero point per
    direction ([directions]) or per gate column ([directions, 4 * hidden]); in numpy where they
    are constants, as they are in every model `quantize_dynamic` writes."""
    arrays = _constants(codes, scale, zero_point)
    if arrays is not None and all(a is not None for a in arrays):
        values, scales, zero_points = arrays
        directions = values.shape[0]
        values = (values.astype(_FLOAT) - zero_points.reshape(directions, 1, -1)) * scales.reshape(directions, 1, -1)
        return relax.const(np.ascontiguousarray(values.transpose(0, 2, 1).astype(_FLOAT)))

    def per_column(value):
        as_float = _as_float(bb, value)
        return relax.op.reshape(as_float, [-1, 1, 1]) if value.ty.ndim == 1 else relax.op.expand_dims(as_float, 1)

    values = relax.op.multiply(relax.op.subtract(_as_float(bb, codes), per_column(zero_point)), per_column(scale))
    return bb.emit(relax.op.permute_dims(values, [0, 2, 1]))


def dynamic_quantize_lstm(bb, inputs, attrs, opset):
    """com.microsoft.DynamicQuantizeLSTM: ONNX LSTM with int8/uint8 weights W [directions, input,
    4 * hidden] and R [directions, hidden, 4 * hidden] and their scales and zero points, whose
    products ONNX Runtime takes of x quantized once over the whole sequence and of each step's
    hidden state quantized anew (per direction, over the batch)."""
    x, w, r, bias, lengths, h0, c0, peepholes, w_scale, w_zero_point, r_scale, r_zero_point = (
        list(inputs) + [None] * 12)[:12]
    recurrent = _dequantized(bb, r, r_scale, r_zero_point)
    recurrent_codes = _codes_by_column(r, r_scale, r_zero_point)
    state = lambda h: fake_quantized(bb, h)  # noqa: E731
    input_codes = _codes_by_column(w, w_scale, w_zero_point)
    if input_codes is None or int(attrs.get("layout", 0)):
        weights = [_dequantized(bb, w, w_scale, w_zero_point), recurrent]
        return lstm(bb, [fake_quantized(bb, x), *weights, bias, lengths, h0, c0, peepholes], attrs, opset,
                    quantize_state=state, recurrent_codes=recurrent_codes)
    # x @ W^T as ONNX Runtime takes it: the integer product of their codes, then their scales
    # (an int8 kernel's, `transform.realize.integer_products`).
    codes, scales = input_codes
    scale, zero_point = quantization_parameters(bb, x)
    x_codes = bb.emit(relax.op.astype(_codes(x, scale, zero_point), "uint8"))
    centred = bb.emit(relax.op.subtract(bb.emit(relax.op.astype(x_codes, _FLOAT)), zero_point))
    weights = [relax.const(codes.value.numpy().astype(_FLOAT)), recurrent]
    return lstm(bb, [centred, *weights, bias, lengths, h0, c0, peepholes], attrs, opset, quantize_state=state,
                recurrent_codes=recurrent_codes, input_scale=bb.emit(relax.op.multiply(scales, scale)))


def _codes_by_column(codes, scale, zero_point):
    """W's or R's codes less their zero point, [directions, 4 * hidden, rows] (int8 where the
    zero point is 0, else int16), and their scales [directions, 4 * hidden], as constants; None
    where one of them is not a constant."""
    arrays = _constants(codes, scale, zero_point)
    if arrays is None or any(a is None for a in arrays):
        return None
    values, scales, zero_points = arrays
    directions, width = values.shape[0], values.shape[2]
    zero_points = zero_points.reshape(directions, 1, -1).astype(np.int16)
    centred = np.ascontiguousarray((values.astype(np.int16) - zero_points).transpose(0, 2, 1))
    if values.dtype == np.int8 and not zero_points.any():
        centred = centred.astype(np.int8)
    scales = np.broadcast_to(scales.reshape(directions, -1), (directions, width)).astype(np.float32)
    return relax.const(centred), relax.const(np.ascontiguousarray(scales))

