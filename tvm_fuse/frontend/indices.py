"""ONNX's index ops (Gather, GatherElements, GatherND, Scatter, ScatterElements, ScatterND)
with their indices checked, then converted by TVM's converters. ONNX refuses an index outside
the axis it indexes; TVM's kernels read or write past the tensor there (a position table of 8 rows gathered
by `arange(seq)` returned rows of other memory for seq 12). Indices the build knows are checked
at build; the others at run time (`compute.checked_indices`)."""

from __future__ import annotations

import numpy as np
from tvm import relax, te, tirx
from tvm.ir.expr import GenericConst
from tvm.relax.frontend.onnx.onnx_frontend import _get_convert_map

from ..compute.checked_indices import CHECKED_INDICES, checked_indices
from ..errors import ModelLoadError
from ..ir_names import KERNEL_ATTR, OP_PATTERN_ATTR, OPAQUE
from .attributes import node_name, refuse
from .slicing import dims_in_range


def gather(bb, inputs, attrs, opset):
    return _element_indices("Gather", bb, inputs, attrs, opset)


def gather_elements(bb, inputs, attrs, opset):
    return _element_indices("GatherElements", bb, inputs, attrs, opset)


def scatter_elements(bb, inputs, attrs, opset):
    return _element_indices("ScatterElements", bb, inputs, attrs, opset)


def scatter(bb, inputs, attrs, opset):  # ScatterElements' name before opset 11
    return _element_indices("Scatter", bb, inputs, attrs, opset)


def gather_nd(bb, inputs, attrs, opset):
    return _tuple_indices("GatherND", bb, inputs, attrs, opset, int(attrs.get("batch_dims", 0)))


def scatter_nd(bb, inputs, attrs, opset):
    return _tuple_indices("ScatterND", bb, inputs, attrs, opset, 0)


def _element_indices(op: str, bb, inputs, attrs, opset):
    """Each index selects along the node's `axis`."""
    data = inputs[0]
    if isinstance(data, relax.ShapeExpr) and isinstance(inputs[1], GenericConst):
        return None  # an item of a shape: TVM's converter indexes it at build, as Python does (or fails)
    shape = _shape(data)
    if shape is None:
        raise refuse(op, attrs, opset, "its data's shape is unknown at build")
    axis = int(attrs.get("axis", 0))
    axis = axis + len(shape) if axis < 0 else axis
    return _converted(op, bb, inputs, attrs, opset, [shape[axis]])


def _tuple_indices(op: str, bb, inputs, attrs, opset, batch_dims: int):
    """The last axis of the indices holds coordinates of the data's axes from `batch_dims` on."""
    shape, indices_shape = _shape(inputs[0]), _shape(inputs[1])
    if shape is None or indices_shape is None or not isinstance(indices_shape[-1], int | tirx.IntImm):
        raise refuse(op, attrs, opset, "its data's shape or its indices' last dim is unknown at build")
    return _converted(op, bb, inputs, attrs, opset, shape[batch_dims:batch_dims + int(indices_shape[-1])])


def _converted(op: str, bb, inputs, attrs, opset, extents: list):
    """TVM's conversion of the node with its indices (`inputs[1]`) checked against the
    `extents` of the axes they index: each index against every extent in turn along the
    indices' last axis, or against the one extent."""
    inputs = list(inputs)
    inputs[1] = _checked(op, bb, inputs[1], extents, attrs, opset)
    return _get_convert_map()[op].get_converter(opset)(bb, inputs, attrs, [{}, {}])


def _checked(op: str, bb, indices, extents: list, attrs, opset):
    """`indices` checked against `extents`: constants at build where the extents are static or
    provably hold them, the rest by a kernel that runs before the node."""
    extents = [tirx.IntImm("int64", e) if isinstance(e, int) else e.astype("int64") for e in extents]
    if isinstance(indices, GenericConst):
        values = indices.value.numpy()
        if all(isinstance(e, tirx.IntImm) for e in extents):
            return relax.const(_counted_from_start(op, values, [int(e) for e in extents], attrs), str(values.dtype))
        with dims_in_range(extents) as analyzer:
            if values.size and all(analyzer.can_prove(tirx.all(int(values.min()) >= -e, int(values.max()) < e))
                                   for e in extents):
                return indices
    if isinstance(indices, relax.ShapeExpr):
        indices = bb.normalize(relax.op.shape_to_tensor(indices))
    indices_shape = _shape(indices)
    if indices_shape is None:
        raise refuse(op, attrs, opset, "its indices are computed at run time, of a shape unknown at build")
    message = (f"{op} node {node_name(attrs)!r}: an index lies outside the axis it indexes "
               f"(ONNX allows [-size, size - 1]), as computed from this run's inputs")
    func, scalars = checked_indices(te.placeholder(indices_shape, str(indices.ty.dtype)), extents, message)
    kernel = bb.add_func(func.with_attrs({KERNEL_ATTR: CHECKED_INDICES, OP_PATTERN_ATTR: OPAQUE}),
                         CHECKED_INDICES)
    return bb.emit(relax.call_tir(kernel, [indices, *map(relax.prim_value, scalars)],
                                  relax.TensorType(indices_shape, indices.ty.dtype)))


def _counted_from_start(op: str, values: np.ndarray, extents: list[int], attrs) -> np.ndarray:
    """Constant indices with negative ones counted from the axis' end, or an error naming the
    node at one outside its axis."""
    bounds = np.array(extents if len(extents) > 1 else extents[0], values.dtype)  # along the last axis
    outside = (values < -bounds) | (values >= bounds) if values.size else np.zeros(0, bool)
    if outside.any():
        index = values[outside].reshape(-1)[0]
        extent = int(np.broadcast_to(bounds, values.shape)[outside].reshape(-1)[0])
        raise ModelLoadError(f"{op} node {node_name(attrs)!r} has the constant index {int(index)} into an "
                             f"axis of size {extent} (ONNX allows [{-extent}, {extent - 1}])")
    return np.where(values < 0, values + bounds, values).astype(values.dtype)


def _shape(value) -> list | None:
    """The dims of a tensor, a constant or a shape (as the tensor of its dims); None if unknown."""
    if isinstance(value, GenericConst):
        return [tirx.IntImm("int64", d) for d in value.value.numpy().shape]
    if isinstance(value, relax.ShapeExpr):
        return [tirx.IntImm("int64", len(value.values))]
    ty = getattr(value, "ty", None)
    if isinstance(ty, relax.TensorType) and ty.shape is not None:
        return list(ty.shape)
    return None
