"""Random one-op (and few-op) ONNX models as hypothesis strategies, one per op family the
frontend accepts, drawn over the attributes, opsets, dtypes and broadcasting the ONNX spec
allows. Each strategy draws a `Case`: nodes, fed inputs, weights and opset."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import onnx
from hypothesis import assume
from hypothesis import strategies as st
from hypothesis.extra.numpy import mutually_broadcastable_shapes
from onnx import helper, numpy_helper

SYMBOLIC = "n"  # the name axis 0 gets in a case built with symbolic dims
STATIC, BATCH, ALL = "static", "batch", "all"  # which axes of a case's inputs are symbolic


@dataclass
class Case:
    nodes: list[onnx.NodeProto]
    inputs: dict[str, np.ndarray]  # fed at run time
    weights: dict[str, np.ndarray] = field(default_factory=dict)  # initializers
    opset: int = 17
    batch: bool = True  # axis 0 of the inputs is a batch, which may be symbolic
    spatial: bool = True  # with a symbolic batch, the other axes may be symbolic too
    kernels: bool = False  # the weights are a conv's kernels: they meet the inputs on axis 1 alone

    def model(self, symbolic: str = STATIC) -> onnx.ModelProto:
        """The case as a checked model. `symbolic` `BATCH`: axis 0 of every input of the largest
        rank whose axis 0 has the first input's size (> 1) is the dim `SYMBOLIC` (a batch, so it
        meets no other input's axis but its own, nor a weight's), compiled as dynamic; `ALL`:
        besides, every other axis of such an input whose size is above 1 and meets no weight's
        axis of the same rank and size above 1 is a dim of its own, one name per axis and size
        (so that inputs meeting on it share it). A conv's kernels (`kernels`) meet its input on
        the channel axis alone."""
        first = next(iter(self.inputs.values()))
        rank = max(a.ndim for a in self.inputs.values())
        meets_weight = not self.kernels and any(w.ndim == rank and w.shape[0] > 1 for w in self.weights.values())
        batch = first.shape[0] if self.batch and first.ndim == rank and first.shape[0] > 1 and not meets_weight \
            else None
        weighted = {1} if self.kernels else \
            {axis for w in self.weights.values() if w.ndim == rank for axis in range(rank) if w.shape[axis] > 1}

        def dims(array):
            shape = list(array.shape)
            if symbolic == STATIC or batch is None or array.ndim != rank or shape[0] != batch:
                return shape
            shape[0] = SYMBOLIC
            if symbolic == ALL and self.spatial:
                shape[1:] = [f"{SYMBOLIC}{axis}_{size}" if size > 1 and axis not in weighted else size
                             for axis, size in enumerate(shape[1:], 1)]
            return shape

        produced = [out for node in self.nodes for out in node.output if out]
        read = {name for node in self.nodes for name in node.input}
        graph = helper.make_graph(
            self.nodes, "case",
            [helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(a.dtype), dims(a))
             for name, a in self.inputs.items()],
            [helper.make_value_info(name, onnx.TypeProto()) for name in produced if name not in read],
            [numpy_helper.from_array(a, name) for name, a in self.weights.items()])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", self.opset)])
        model.ir_version = 8 if self.opset <= 18 else 10
        inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True)
        del model.graph.output[:]
        model.graph.output.extend(inferred.graph.output)
        onnx.checker.check_model(model, full_check=True)
        return model


def _values(draw, shape, low=-3.0, high=3.0, dtype=np.float32) -> np.ndarray:
    seed = draw(st.integers(0, 2**16))
    rng = np.random.default_rng(seed)
    if np.issubdtype(dtype, np.integer):
        return rng.integers(int(low), int(high) + 1, shape).astype(dtype)
    return rng.uniform(low, high, shape).astype(dtype)


LONG_ROW = (17, 40)  # a last axis past a vector and a tile or two: the kernels' peeled row ends


def _shape(draw, min_rank=1, max_rank=4, min_side=1, max_side=6) -> tuple[int, ...]:
    """A shape whose sides lie in [min_side, max_side], but for a last axis of `LONG_ROW` in about
    one draw of four: sides below a vector never reach the code that ends a row of vectors."""
    rank = draw(st.integers(min_rank, max_rank))
    sides = [draw(st.integers(min_side, max_side)) for _ in range(rank)]
    if draw(st.booleans()) and draw(st.booleans()):
        sides[-1] = draw(st.integers(*LONG_ROW))
    return tuple(sides)


def _node(op: str, inputs, outputs=("y",), **attrs) -> onnx.NodeProto:
    return helper.make_node(op, list(inputs), list(outputs), name=f"{op.lower()}_node",
                            **{k: v for k, v in attrs.items() if v is not None})


# --- elementwise --------------------------------------------------------------------------------

# op -> (low, high) of its inputs: in its domain, and where float32 keeps a few digits.
UNARY = {
    "Relu": (-3, 3), "Sigmoid": (-12, 12), "Tanh": (-6, 6), "Exp": (-10, 10), "Log": (0.05, 9),
    "Sqrt": (0, 9), "Abs": (-3, 3), "Neg": (-3, 3), "Erf": (-3, 3), "Floor": (-3, 3), "Ceil": (-3, 3),
    "Reciprocal": (0.2, 4), "Softplus": (-8, 8), "Softsign": (-3, 3), "HardSwish": (-5, 5), "Sin": (-3, 3),
    "Cos": (-3, 3), "Sign": (-3, 3), "Round": (-3, 3), "Identity": (-3, 3), "Mish": (-5, 5),
}


@st.composite
def unary(draw) -> Case:
    op = draw(st.sampled_from(sorted(UNARY)))
    low, high = UNARY[op]
    return Case([_node(op, ["x"])], {"x": _values(draw, _shape(draw), low, high)}, opset=18)


@st.composite
def activation(draw) -> Case:
    """Activations with attributes."""
    op = draw(st.sampled_from(["LeakyRelu", "Elu", "Selu", "HardSigmoid", "Celu", "ThresholdedRelu", "Gelu"]))
    alpha = draw(st.sampled_from([0.01, 0.2, 1.0, 1.7]))
    attrs = {
        "LeakyRelu": {"alpha": alpha}, "Elu": {"alpha": alpha}, "Celu": {"alpha": alpha},
        "Selu": {}, "ThresholdedRelu": {"alpha": alpha},
        "HardSigmoid": {"alpha": draw(st.sampled_from([0.2, 1 / 6])), "beta": draw(st.sampled_from([0.5, 0.4]))},
        "Gelu": {"approximate": draw(st.sampled_from(["none", "tanh"]))},
    }[op]
    return Case([_node(op, ["x"], **attrs)], {"x": _values(draw, _shape(draw), -4, 4)},
                opset=20 if op == "Gelu" else 17)


BINARY = {"Add": (-3, 3), "Sub": (-3, 3), "Mul": (-3, 3), "Div": (0.5, 3), "Pow": (0.5, 2), "Max": (-3, 3),
          "Min": (-3, 3), "Mod": (1, 5)}


@st.composite
def binary(draw) -> Case:
    """A binary op over numpy-broadcast shapes; the second operand a constant or not."""
    op = draw(st.sampled_from(sorted(BINARY)))
    low, high = BINARY[op]
    shapes = draw(mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=4, max_side=5)).input_shapes
    a, b = (_values(draw, shape, low, high) for shape in shapes)
    attrs = {"fmod": 1} if op == "Mod" else {}
    if not a.ndim:
        a = a.reshape(1)
    if draw(st.booleans()):
        return Case([_node(op, ["a", "b"], **attrs)], {"a": a}, {"b": b})
    return Case([_node(op, ["a", "b"], **attrs)], {"a": a, "b": b})


@st.composite
def variadic(draw) -> Case:
    op = draw(st.sampled_from(["Sum", "Mean", "Max", "Min"]))
    count = draw(st.integers(1, 3))
    shapes = draw(mutually_broadcastable_shapes(num_shapes=count, min_dims=1, max_dims=4, max_side=5)).input_shapes
    names = [f"x{i}" for i in range(count)]
    return Case([_node(op, names)], {n: _values(draw, s) for n, s in zip(names, shapes)})


@st.composite
def compare_where(draw) -> Case:
    """A comparison selecting between two tensors (a mask as detectors' heads make one)."""
    op = draw(st.sampled_from(["Greater", "Less", "Equal", "GreaterOrEqual", "LessOrEqual"]))
    shapes = draw(mutually_broadcastable_shapes(num_shapes=3, min_dims=1, max_dims=3, max_side=5)).input_shapes
    a, b, c = (_values(draw, s, -2, 2, np.int64 if op == "Equal" else np.float32) for s in shapes)
    if op == "Equal":
        nodes = [_node(op, ["a", "b"], ["mask"]), helper.make_node("Cast", ["a"], ["af"], to=1),
                 _node("Where", ["mask", "af", "c"])]
        return Case(nodes, {"a": a, "b": b, "c": c.astype(np.float32)})
    return Case([_node(op, ["a", "b"], ["mask"]), _node("Where", ["mask", "a", "c"])], {"a": a, "b": b, "c": c})


@st.composite
def clip(draw) -> Case:
    x = _values(draw, _shape(draw), -4, 4)
    low, high = draw(st.sampled_from([(-1.0, 1.0), (0.0, 6.0), (None, 0.5), (-0.5, None), (None, None)]))
    if draw(st.booleans()):  # opset 6: attributes
        return Case([_node("Clip", ["x"], min=low, max=high)], {"x": x}, opset=6)
    weights = {k: np.array(v, np.float32) for k, v in (("lo", low), ("hi", high)) if v is not None}
    inputs = ["x", "lo" if low is not None else "", "hi" if high is not None else ""]
    while inputs[-1] == "":
        inputs.pop()
    return Case([_node("Clip", inputs)], {"x": x}, weights, opset=13)


@st.composite
def prelu(draw) -> Case:
    """PRelu with a slope per channel (as exporters write it), one slope, or one per element."""
    n, c, h, w = draw(st.integers(1, 3)), draw(st.integers(1, 8)), draw(st.integers(1, 5)), draw(st.integers(1, 5))
    slope_shape = draw(st.sampled_from([(c, 1, 1), (1,), (c, h, w), (1, c, 1, 1)]))
    return Case([_node("PRelu", ["x", "slope"])], {"x": _values(draw, (n, c, h, w))},
                {"slope": _values(draw, slope_shape, -0.5, 0.5)}, opset=16)


# --- reductions and normalizations --------------------------------------------------------------


@st.composite
def softmax(draw) -> Case:
    op = draw(st.sampled_from(["Softmax", "LogSoftmax", "Hardmax"]))
    shape = _shape(draw, 1, 4)
    opset = draw(st.sampled_from([11, 13]))  # 11: the input is coerced to 2-D at axis
    axis = draw(st.integers(-len(shape), len(shape) - 1))
    return Case([_node(op, ["x"], axis=axis)], {"x": _values(draw, shape, -5, 5)}, opset=opset)


REDUCE = ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
          "ReduceLogSumExp", "ReduceSumSquare"]


@st.composite
def reduce(draw) -> Case:
    op = draw(st.sampled_from(REDUCE))
    shape = _shape(draw, 1, 4, max_side=5)
    axes = draw(st.none() | st.lists(st.integers(-len(shape), len(shape) - 1), min_size=1, max_size=len(shape),
                                     unique_by=lambda a: a % len(shape)))
    keepdims = draw(st.sampled_from([0, 1]))
    low, high = (0.5, 1.5) if op == "ReduceProd" else (-3, 3)
    x = _values(draw, shape, low, high)
    if draw(st.booleans()):  # opset 18: axes as an input
        weights = {"axes": np.array(axes, np.int64)} if axes is not None else {}
        return Case([_node(op, ["x", "axes"] if axes is not None else ["x"], keepdims=keepdims)], {"x": x}, weights,
                    opset=18)
    if op == "ReduceSum":
        weights = {"axes": np.array(axes, np.int64)} if axes is not None else {}
        return Case([_node(op, ["x", "axes"] if axes is not None else ["x"], keepdims=keepdims)], {"x": x}, weights,
                    opset=13)
    return Case([_node(op, ["x"], axes=axes, keepdims=keepdims)], {"x": x}, opset=13)


@st.composite
def argmax(draw) -> Case:
    op = draw(st.sampled_from(["ArgMax", "ArgMin"]))
    shape = _shape(draw, 1, 4)
    axis = draw(st.integers(-len(shape), len(shape) - 1))
    # Small integers as floats: ties, which select_last_index decides.
    x = _values(draw, shape, -2, 2, np.int64).astype(np.float32)
    return Case([_node(op, ["x"], axis=axis, keepdims=draw(st.sampled_from([0, 1])),
                       select_last_index=draw(st.sampled_from([0, 1])))], {"x": x}, opset=13)


@st.composite
def normalization(draw) -> Case:
    op = draw(st.sampled_from(["BatchNormalization", "InstanceNormalization", "LayerNormalization", "LRN",
                               "GroupNormalization"]))
    n, c = draw(st.integers(1, 3)), draw(st.sampled_from([1, 2, 4, 6]))
    spatial = tuple(draw(st.integers(1, 6)) for _ in range(draw(st.integers(1, 2))))
    x = _values(draw, (n, c, *spatial))
    scale, bias = _values(draw, (c,), 0.5, 1.5), _values(draw, (c,), -1, 1)
    if op == "BatchNormalization":
        weights = {"s": scale, "b": bias, "m": _values(draw, (c,), -1, 1), "v": _values(draw, (c,), 0.5, 2)}
        return Case([_node(op, ["x", "s", "b", "m", "v"], epsilon=1e-3)], {"x": x}, weights, opset=15)
    if op == "InstanceNormalization":
        return Case([_node(op, ["x", "s", "b"], epsilon=1e-5)], {"x": x}, {"s": scale, "b": bias})
    if op == "LRN":
        return Case([_node(op, ["x"], size=draw(st.sampled_from([1, 3, 5])), alpha=1e-2, beta=0.75, bias=1.0)],
                    {"x": x})
    if op == "GroupNormalization":
        groups = draw(st.sampled_from([g for g in (1, 2, c) if c % g == 0]))
        return Case([_node(op, ["x", "s", "b"], num_groups=groups, epsilon=1e-5)], {"x": x},
                    {"s": scale, "b": bias}, opset=18)
    axis = draw(st.integers(-x.ndim + 1, x.ndim - 1))
    norm_shape = x.shape[axis:]
    return Case([_node(op, ["x", "s", "b"], axis=axis, epsilon=1e-5)], {"x": x},
                {"s": _values(draw, norm_shape, 0.5, 1.5), "b": _values(draw, norm_shape, -1, 1)})


# --- dense --------------------------------------------------------------------------------------


@st.composite
def matmul(draw) -> Case:
    k, n = draw(st.integers(1, 40)), draw(st.integers(1, 40))
    batch_a, batch_b = draw(mutually_broadcastable_shapes(num_shapes=2, max_dims=2, max_side=3)).input_shapes
    m = draw(st.integers(1, 9))
    a_shape = (*batch_a, m, k) if draw(st.integers(0, 5)) else (k,)
    b_shape = (*batch_b, k, n) if draw(st.integers(0, 5)) else (k,)
    a, b = _values(draw, a_shape, -1, 1), _values(draw, b_shape, -1, 1)
    if draw(st.booleans()):
        return Case([_node("MatMul", ["a", "b"])], {"a": a}, {"b": b})
    return Case([_node("MatMul", ["a", "b"])], {"a": a, "b": b})


@st.composite
def gemm(draw) -> Case:
    m, k, n = draw(st.integers(1, 9)), draw(st.integers(1, 40)), draw(st.integers(1, 40))
    trans_a, trans_b = draw(st.sampled_from([0, 1])), draw(st.sampled_from([0, 1]))
    a = _values(draw, (k, m) if trans_a else (m, k), -1, 1)
    b = _values(draw, (n, k) if trans_b else (k, n), -1, 1)
    c_shape = draw(st.sampled_from([None, (n,), (1, n), (m, n), (m, 1), ()]))
    weights = {"b": b} if draw(st.booleans()) else {}
    inputs = {"a": a} if weights else {"a": a, "b": b}
    names = ["a", "b"]
    if c_shape is not None:
        weights["c"] = _values(draw, c_shape, -1, 1)
        names.append("c")
    return Case([_node("Gemm", names, transA=trans_a, transB=trans_b, alpha=draw(st.sampled_from([1.0, 0.5])),
                       beta=draw(st.sampled_from([1.0, 2.0])))], inputs, weights, opset=13, batch=not trans_a)


# --- convolutions and pools ---------------------------------------------------------------------


def _kernel_and_bias(draw, kernel_shape, channels: int) -> tuple[dict, list[str]]:
    """A conv's weights (its kernel, and a bias or not) and its input names."""
    weights = {"w": _values(draw, kernel_shape, -0.5, 0.5)}
    if draw(st.booleans()):
        weights["bias"] = _values(draw, (channels,), -1, 1)
    return weights, ["x", *weights]


@st.composite
def conv(draw) -> Case:
    """Conv 1-D or 2-D: groups (depthwise too), strides, dilations, asymmetric pads or auto_pad, bias."""
    dims = draw(st.sampled_from([1, 2, 2, 2]))
    groups = draw(st.sampled_from([1, 1, 2, "depthwise"]))
    # Up to 64 channels, for blocked kernels of several channel blocks (and Winograd's).
    per_group = draw(st.integers(1, 6) | st.sampled_from([16, 32]))
    c_in = per_group * (2 if groups == 2 else 1) if groups != "depthwise" else draw(st.integers(1, 24))
    groups = c_in if groups == "depthwise" else groups
    c_out = groups * draw(st.integers(1, 3)) if groups > 1 else draw(st.integers(1, 20) | st.sampled_from([32, 64]))
    kernel = tuple(draw(st.integers(1, 3)) for _ in range(dims))
    strides = tuple(draw(st.integers(1, 2)) for _ in range(dims))
    dilations = tuple(draw(st.integers(1, 2)) for _ in range(dims))
    # 1-D rows up to 150 wide, past the widths the direct kernel rounds to whole vectors (16, 128).
    longest = 150 if dims == 1 else 20
    spatial = tuple(draw(st.integers(max(k + (k - 1) * (d - 1), 1), longest)) for k, d in zip(kernel, dilations))
    auto_pad = draw(st.sampled_from(["NOTSET", "NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"]))
    pads = tuple(draw(st.integers(0, k - 1)) for k in kernel * 2) if auto_pad == "NOTSET" else None
    if auto_pad.startswith("SAME"):
        dilations = (1,) * dims  # ONNX Runtime's SAME padding ignores dilations
    weights, names = _kernel_and_bias(draw, (c_out, c_in // groups, *kernel), c_out)
    node = _node("Conv", names, group=groups, strides=strides, dilations=dilations, pads=pads,
                 auto_pad=auto_pad if auto_pad != "NOTSET" else None, kernel_shape=kernel)
    return Case([node], {"x": _values(draw, (draw(st.integers(1, 2)), c_in, *spatial), -1, 1)}, weights, opset=13,
                kernels=True)


@st.composite
def conv_transpose(draw) -> Case:
    """ConvTranspose 1-D or 2-D: groups, strides, pads, output padding, bias."""
    dims = draw(st.sampled_from([1, 2, 2]))
    groups = draw(st.sampled_from([1, 1, 2]))
    c_in, c_out = groups * draw(st.integers(1, 4)), groups * draw(st.integers(1, 4))
    kernel = tuple(draw(st.integers(1, 4)) for _ in range(dims))
    strides = tuple(draw(st.integers(1, 3)) for _ in range(dims))
    pads = tuple(draw(st.integers(0, k - 1)) for k in kernel * 2)
    output_padding = tuple(draw(st.integers(0, s - 1)) for s in strides)
    weights, names = _kernel_and_bias(draw, (c_in, c_out // groups, *kernel), c_out)
    node = _node("ConvTranspose", names, group=groups, strides=strides, pads=pads, kernel_shape=kernel,
                 output_padding=output_padding if any(output_padding) else None)
    x = _values(draw, (draw(st.integers(1, 2)), c_in, *(draw(st.integers(1, 40 if dims == 1 else 7))
                                                          for _ in range(dims))), -1, 1)
    return Case([node], {"x": x}, weights, opset=13, kernels=True)


@st.composite
def pool(draw) -> Case:
    op = draw(st.sampled_from(["MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool", "LpPool"]))
    x = _values(draw, (draw(st.integers(1, 2)), draw(st.integers(1, 18)), draw(st.integers(3, 11)),
                       draw(st.integers(3, 11))))
    if op.startswith("Global"):
        return Case([_node(op, ["x"])], {"x": x})
    kernel = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    strides = (draw(st.integers(1, 2)), draw(st.integers(1, 2)))
    pads = tuple(draw(st.integers(0, k - 1)) for k in kernel * 2)
    attrs = {"kernel_shape": kernel, "strides": strides, "pads": pads}
    if op == "LpPool":
        return Case([_node(op, ["x"], p=2, **attrs)], {"x": x}, opset=18)
    attrs["ceil_mode"] = draw(st.sampled_from([0, 1]))
    if op == "AveragePool":
        attrs["count_include_pad"] = draw(st.sampled_from([0, 1]))
    elif draw(st.booleans()):
        attrs["dilations"] = (draw(st.integers(1, 2)), draw(st.integers(1, 2)))
    return Case([_node(op, ["x"], **attrs)], {"x": x}, opset=19)


# --- shapes and data movement -------------------------------------------------------------------


@st.composite
def reshape(draw) -> Case:
    op = draw(st.sampled_from(["Reshape", "Flatten", "Transpose", "Squeeze", "Unsqueeze"]))
    shape = _shape(draw, 1, 4, max_side=4)
    x = _values(draw, shape)
    if op == "Reshape":
        size = x.size
        target = list(draw(st.permutations(shape)))
        if draw(st.booleans()) and len(target) > 1:
            target = [size // int(np.prod(target[1:])), *target[1:]]
            target[0] = -1
        elif draw(st.booleans()) and target[0] == shape[0]:
            target[0] = 0  # copy the input's dim
        if draw(st.booleans()):  # as torch writes `x.view(x.size(0), -1)`: dims read from the input's shape
            sources = [draw(st.sampled_from([a for a, d in enumerate(shape) if d == t] or [None])) if t > 0 else None
                       for t in target]
            weights = {}
            nodes = _from_shape(draw, shape, {"target": list(zip(target, sources))}, weights)
            return Case(nodes + [_node(op, ["x", "target"])], {"x": x}, weights, opset=14)
        return Case([_node(op, ["x", "shape"])], {"x": x}, {"shape": np.array(target, np.int64)}, opset=14)
    if op == "Flatten":
        return Case([_node(op, ["x"], axis=draw(st.integers(-len(shape), len(shape))))], {"x": x}, opset=13)
    if op == "Transpose":
        return Case([_node(op, ["x"], perm=list(draw(st.permutations(range(len(shape))))))], {"x": x})
    if op == "Squeeze":
        ones = [a for a, d in enumerate(shape) if d == 1]
        axes = draw(st.lists(st.sampled_from(ones), unique=True)) if ones else []
        weights = {"axes": np.array(axes, np.int64)} if axes else {}
        return Case([_node(op, ["x", "axes"] if axes else ["x"])], {"x": x}, weights, opset=13)
    axes = sorted(draw(st.lists(st.integers(0, len(shape)), min_size=1, max_size=2, unique=True)))
    return Case([_node(op, ["x", "axes"])], {"x": x}, {"axes": np.array(axes, np.int64)}, opset=13)


@st.composite
def concat_split(draw) -> Case:
    shape = list(_shape(draw, 1, 4, max_side=5))
    axis = draw(st.integers(-len(shape), len(shape) - 1))
    if draw(st.booleans()):
        count = draw(st.integers(1, 3))
        parts = {}
        for i in range(count):
            part = list(shape)
            part[axis] = draw(st.integers(1, 4))
            parts[f"x{i}"] = _values(draw, part)
        return Case([_node("Concat", list(parts), axis=axis)], parts, opset=13)
    length = shape[axis]
    x = _values(draw, shape)
    if draw(st.booleans()) and length > 1:
        cut = draw(st.integers(1, length - 1))
        return Case([_node("Split", ["x", "split"], ["y0", "y1"], axis=axis)], {"x": x},
                    {"split": np.array([cut, length - cut], np.int64)}, opset=13)
    outputs = draw(st.integers(1, min(length, 3)))
    return Case([_node("Split", ["x"], [f"y{i}" for i in range(outputs)], axis=axis, num_outputs=outputs)],
                {"x": x}, opset=18)


def _from_shape(draw, shape, vectors: dict[str, list[tuple[int, int | None]]], weights) -> list[onnx.NodeProto]:
    """Nodes computing each 1-D int64 tensor of `vectors` (name -> (value, axis) per element),
    an element either the constant or, where it has an axis, at random Shape(x)[axis] + offset,
    the same value at these sizes (as torch writes `x.size(1) - k`): an expression of that
    axis's dim in a symbolic build."""
    nodes = [helper.make_node("Shape", ["x"], ["shape"], name="shape")]
    for name, entries in vectors.items():
        parts = []
        for i, (value, axis) in enumerate(entries):
            part = f"{name}{i}"
            if axis is not None and abs(value) < 2**31 and draw(st.booleans()):
                weights[f"{part}_axis"] = np.array([axis % len(shape)], np.int64)
                weights[f"{part}_offset"] = np.array([value - shape[axis]], np.int64)
                nodes += [helper.make_node("Gather", ["shape", f"{part}_axis"], [f"{part}_dim"], name=f"{part}_dim"),
                          helper.make_node("Add", [f"{part}_dim", f"{part}_offset"], [part], name=part)]
            else:
                weights[part] = np.array([value], np.int64)
            parts.append(part)
        nodes.append(helper.make_node("Concat", parts, [name], name=name, axis=0))
    return nodes


@st.composite
def slice_gather(draw) -> Case:
    shape = _shape(draw, 1, 4, max_side=7)
    x = _values(draw, shape)
    if draw(st.booleans()):
        axes = draw(st.lists(st.integers(-len(shape), len(shape) - 1), min_size=1, max_size=len(shape),
                             unique_by=lambda a: a % len(shape)))
        starts, ends, steps = [], [], []
        for axis in axes:
            size = shape[axis]
            step = draw(st.sampled_from([1, 1, 2, -1, -2]))
            starts.append(draw(st.integers(-size - 2, size + 2)))
            ends.append(draw(st.sampled_from([draw(st.integers(-size - 2, size + 2)), 2**62, -(2**62)])))
            steps.append(step)
        weights = {"axes": np.array(axes, np.int64), "steps": np.array(steps, np.int64)}
        nodes = [_node("Slice", ["x", "starts", "ends", "axes", "steps"])]
        if draw(st.booleans()):  # as torch writes `x[:, x.size(1) - k:]`: an index from the input's shape
            nodes = _from_shape(draw, shape, {"starts": list(zip(starts, axes)), "ends": list(zip(ends, axes))},
                                weights) + nodes
        else:
            weights.update(starts=np.array(starts, np.int64), ends=np.array(ends, np.int64))
        # tvm_fuse builds no empty tensors: not one empty for the fed sizes
        assume(all(len(range(*slice(b, e, s).indices(shape[a]))) for a, b, e, s in zip(axes, starts, ends, steps)))
        return Case(nodes, {"x": x}, weights, opset=13)
    axis = draw(st.integers(-len(shape), len(shape) - 1))
    size = shape[axis]
    indices = np.array(draw(st.lists(st.integers(-size, size - 1), min_size=1, max_size=5)), np.int64)
    if draw(st.booleans()):
        indices = indices[0].reshape(())  # a scalar index drops the axis
    return _indexed(draw, [_node("Gather", ["x", "i"], axis=axis)], {"x": x}, indices, opset=13)


def _indexed(draw, nodes, inputs: dict, indices: np.ndarray, opset: int) -> Case:
    """A case of an index op whose indices `i` are a weight, known at build, or an input that
    the run feeds, checked at run time (`frontend.indices`)."""
    if draw(st.booleans()):
        return Case(nodes, inputs, {"i": indices}, opset=opset)
    return Case(nodes, {**inputs, "i": indices}, opset=opset)


@st.composite
def pad(draw) -> Case:
    shape = _shape(draw, 1, 4, min_side=2, max_side=6)
    mode = draw(st.sampled_from(["constant", "reflect", "edge"]))
    limit = [s - 1 if mode == "reflect" else 3 for s in shape]
    pads = [draw(st.integers(0, lim)) for lim in limit] * 2
    if mode == "constant" and draw(st.booleans()):  # negative pads crop
        pads = [p - (draw(st.integers(0, 1)) if s > 2 else 0) for p, s in zip(pads, shape * 2)]
    weights = {"pads": np.array(pads, np.int64)}
    names = ["x", "pads"]
    if mode == "constant" and draw(st.booleans()):
        weights["value"] = np.array(draw(st.sampled_from([0.0, -1.5])), np.float32)
        names.append("value")
    return Case([_node("Pad", names, mode=mode)], {"x": _values(draw, shape)}, weights, opset=13)


@st.composite
def expand_tile(draw) -> Case:
    shape = _shape(draw, 1, 3, max_side=4)
    x = _values(draw, shape)
    if draw(st.booleans()):
        target = [draw(st.sampled_from([d, 3])) if d == 1 else d for d in shape]
        target = [draw(st.integers(1, 3)) for _ in range(draw(st.integers(0, 1)))] + target
        if draw(st.booleans()):  # as torch writes `x.expand(3, x.size(0), -1)`: the input's dims read from its shape
            lead = len(target) - len(shape)
            weights = {}
            nodes = _from_shape(draw, shape, {"target": [(t, i - lead if i >= lead and t == shape[i - lead] else None)
                                                         for i, t in enumerate(target)]}, weights)
            return Case(nodes + [_node("Expand", ["x", "target"])], {"x": x}, weights, opset=13,
                        batch=all(t == 1 or t == shape[0] for t in target[lead:lead + 1]))
        # Expanding to a constant size fixes the input's dims: none is a batch.
        return Case([_node("Expand", ["x", "shape"])], {"x": x}, {"shape": np.array(target, np.int64)}, opset=13,
                    batch=False)
    repeats = [draw(st.integers(1, 3)) for _ in shape]
    return Case([_node("Tile", ["x", "r"])], {"x": x}, {"r": np.array(repeats, np.int64)}, opset=13)


@st.composite
def depth_space(draw) -> Case:
    block = draw(st.sampled_from([2, 3]))
    if draw(st.booleans()):
        c = block * block * draw(st.integers(1, 3))
        x = _values(draw, (draw(st.integers(1, 2)), c, draw(st.integers(1, 4)), draw(st.integers(1, 4))))
        return Case([_node("DepthToSpace", ["x"], blocksize=block, mode=draw(st.sampled_from(["DCR", "CRD"])))],
                    {"x": x}, opset=13)
    x = _values(draw, (1, draw(st.integers(1, 4)), block * draw(st.integers(1, 3)), block * draw(st.integers(1, 3))))
    return Case([_node("SpaceToDepth", ["x"], blocksize=block)], {"x": x}, opset=13)


@st.composite
def resize(draw) -> Case:
    """Resize of an NCHW image's spatial axes by scales or to sizes, every mode and coordinate rule."""
    n, c, h, w = 1, draw(st.integers(1, 4)), draw(st.integers(1, 7)), draw(st.integers(1, 7))
    mode = draw(st.sampled_from(["nearest", "linear", "cubic"]))
    transform = draw(st.sampled_from(["half_pixel", "asymmetric", "align_corners", "pytorch_half_pixel"]
                                     + (["tf_half_pixel_for_nn"] if mode == "nearest" else [])))
    attrs = {"mode": mode, "coordinate_transformation_mode": transform}
    if mode == "nearest":
        attrs["nearest_mode"] = draw(st.sampled_from(["round_prefer_floor", "round_prefer_ceil", "floor", "ceil"]))
    if mode == "cubic":
        attrs["cubic_coeff_a"] = draw(st.sampled_from([-0.75, -0.5]))
    if draw(st.booleans()):
        scale = (draw(st.sampled_from([0.5, 2.0, 3.0, 1.5])), draw(st.sampled_from([0.5, 2.0, 1.0])))
        weights = {"scales": np.array([1, 1, *scale], np.float32)}
        names = ["x", "", "scales"]
    else:
        weights = {"sizes": np.array([n, c, draw(st.integers(1, 12)), draw(st.integers(1, 12))], np.int64)}
        names = ["x", "", "", "sizes"]
    return Case([_node("Resize", names, **attrs)], {"x": _values(draw, (n, c, h, w))}, weights, opset=13)


@st.composite
def cast(draw) -> Case:
    """Float to int truncates toward zero; int to float; float to bool and back."""
    x = _values(draw, _shape(draw), -5, 5)
    to = draw(st.sampled_from([onnx.TensorProto.INT32, onnx.TensorProto.INT64, onnx.TensorProto.BOOL]))
    return Case([helper.make_node("Cast", ["x"], ["i"], to=to, name="cast_node"),
                 helper.make_node("Cast", ["i"], ["y"], to=onnx.TensorProto.FLOAT, name="cast_back")],
                {"x": x}, opset=13)


@st.composite
def integer(draw) -> Case:
    """ONNX Runtime's dynamic quantization ops: ConvInteger and MatMulInteger of uint8 codes and
    int8 or uint8 weights about zero points (or none), and DynamicQuantizeLinear."""
    op = draw(st.sampled_from(["ConvInteger", "MatMulInteger", "DynamicQuantizeLinear"]))
    if op == "DynamicQuantizeLinear":
        x = _values(draw, _shape(draw), *draw(st.sampled_from([(-3, 3), (0.5, 4), (0, 0)])))
        return Case([_node(op, ["x"], ["y", "scale", "zero_point"])], {"x": x}, opset=13)
    weight_type = draw(st.sampled_from([np.int8, np.uint8]))
    low, high = (-128, 127) if weight_type == np.int8 else (0, 255)
    if op == "MatMulInteger":
        # Depths of whole quads and widths of whole column blocks too: those run on int8 kernels.
        m = draw(st.integers(1, 9))
        k, n = draw(st.integers(1, 64) | st.sampled_from([4, 16, 64])), draw(st.integers(1, 40) | st.sampled_from([8, 32]))
        x, w = _values(draw, (m, k), 0, 255, np.uint8), _values(draw, (k, n), low, high, weight_type)
        w_zero_point_shape = draw(st.sampled_from([(), (n,)]))
        conv_attrs = {}
    else:  # ONNX Runtime's ConvInteger: 2-D, one weight zero point
        groups = draw(st.sampled_from([1, 1, 2]))
        c_in, c_out = groups * draw(st.integers(1, 6)), groups * draw(st.integers(1, 6))
        kernel = tuple(draw(st.integers(1, 3)) for _ in range(2))
        spatial = tuple(draw(st.integers(k, 14)) for k in kernel)
        x = _values(draw, (draw(st.integers(1, 2)), c_in, *spatial), 0, 255, np.uint8)
        w = _values(draw, (c_out, c_in // groups, *kernel), low, high, weight_type)
        w_zero_point_shape = ()
        conv_attrs = {"group": groups, "kernel_shape": kernel, "strides": tuple(draw(st.integers(1, 2)) for _ in kernel),
                      "pads": tuple(draw(st.integers(0, k - 1)) for k in kernel * 2)}
    weights = {"w": w}
    if draw(st.booleans()):
        weights["x_zero_point"] = _values(draw, (), 0, 255, np.uint8)
        weights["w_zero_point"] = _values(draw, w_zero_point_shape, low // 8, high // 8, weight_type)
    return Case([_node(op, ["x", *weights], **conv_attrs)], {"x": x}, weights, opset=13)


@st.composite
def recurrent(draw) -> Case:
    """LSTM and GRU: directions, initial states, biases, batch-first layout, GRU's
    linear_before_reset."""
    op = draw(st.sampled_from(["LSTM", "GRU"]))
    gates = 4 if op == "LSTM" else 3
    seq, batch, width, hidden = (draw(st.integers(1, 6)), draw(st.integers(1, 3)), draw(st.integers(1, 8)),
                                 draw(st.integers(1, 8)))
    direction = draw(st.sampled_from(["forward", "reverse", "bidirectional"]))
    directions = 2 if direction == "bidirectional" else 1
    layout = draw(st.sampled_from([0, 1]))
    weights = {"W": _values(draw, (directions, gates * hidden, width), -0.5, 0.5),
               "R": _values(draw, (directions, gates * hidden, hidden), -0.5, 0.5),
               "B": _values(draw, (directions, 2 * gates * hidden), -0.5, 0.5)}
    x = _values(draw, (batch, seq, width) if layout else (seq, batch, width), -1, 1)
    inputs, names = {"x": x}, ["x", "W", "R", "B"]
    if draw(st.booleans()):
        state = (batch, directions, hidden) if layout else (directions, batch, hidden)
        weights["h0"] = _values(draw, state, -0.5, 0.5)
        names += ["", "h0"]
    outputs = ["y", "y_h"] + (["y_c"] if op == "LSTM" else [])
    attrs = {"linear_before_reset": draw(st.sampled_from([0, 1]))} if op == "GRU" else {}
    return Case([_node(op, names, outputs, hidden_size=hidden, direction=direction, layout=layout, **attrs)],
                inputs, weights, opset=14, batch=False)


@st.composite
def indexing(draw) -> Case:
    """TopK, CumSum, GatherElements, GatherND, ScatterElements, ScatterND, Einsum."""
    op = draw(st.sampled_from(["TopK", "CumSum", "GatherElements", "GatherND", "ScatterElements", "ScatterND",
                               "Einsum"]))
    shape = _shape(draw, 1, 3, max_side=6)
    axis = draw(st.integers(-len(shape), len(shape) - 1))
    x = _values(draw, shape)
    if op == "TopK":
        k = draw(st.integers(1, shape[axis]))
        return Case([_node(op, ["x", "k"], ["values", "indices"], axis=axis, largest=draw(st.sampled_from([0, 1])),
                           sorted=1)], {"x": x}, {"k": np.array([k], np.int64)}, opset=11)
    if op == "CumSum":
        return Case([_node(op, ["x", "axis"], exclusive=draw(st.sampled_from([0, 1])),
                           reverse=draw(st.sampled_from([0, 1])))], {"x": x}, {"axis": np.array(axis, np.int64)},
                    opset=14)
    if op in ("GatherElements", "ScatterElements"):
        size = shape[axis]
        index_shape = list(shape)
        index_shape[axis] = draw(st.integers(1, 4))
        if op == "GatherElements":
            indices = _values(draw, tuple(index_shape), -size, size - 1, np.int64)
            return _indexed(draw, [_node(op, ["x", "i"], axis=axis)], {"x": x}, indices, opset=13)
        # Distinct places along the axis, so that the update each place gets is defined.
        index_shape[axis] = min(index_shape[axis], size)
        order = np.argsort(_values(draw, (size, *index_shape[:axis], *index_shape[axis + 1:])), axis=0)
        indices = np.moveaxis(order[:index_shape[axis]], 0, axis).astype(np.int64)
        indices -= size * _values(draw, indices.shape, 0, 1, np.int64)  # some counted from the end
        updates = _values(draw, tuple(index_shape))
        return _indexed(draw, [_node(op, ["x", "i", "u"], axis=axis)], {"x": x, "u": updates}, indices, opset=13)
    if op in ("GatherND", "ScatterND"):
        depth = draw(st.integers(1, len(shape)))  # the data axes an index tuple spans
        places = int(np.prod(shape[:depth]))
        chosen = draw(st.permutations(range(places)))[:draw(st.integers(1, min(4, places)))]  # distinct, as above
        tuples = np.stack(np.unravel_index(chosen, shape[:depth]), axis=-1).astype(np.int64)
        tuples -= np.array(shape[:depth]) * _values(draw, tuples.shape, 0, 1, np.int64)
        if op == "GatherND":
            return _indexed(draw, [_node(op, ["x", "i"])], {"x": x}, tuples, opset=13)
        updates = _values(draw, (len(tuples), *shape[depth:]))
        return _indexed(draw, [_node(op, ["x", "i", "u"])], {"x": x, "u": updates}, tuples, opset=13)
    m, k, n = draw(st.integers(1, 5)), draw(st.integers(1, 5)), draw(st.integers(1, 5))
    equation, shapes = draw(st.sampled_from([("ij,jk->ik", ((m, k), (k, n))), ("bij,bjk->bik", ((2, m, k), (2, k, n))),
                                             ("ij->ji", ((m, k),)), ("ij,ij->i", ((m, k), (m, k)))]))
    inputs = {f"x{i}": _values(draw, shape) for i, shape in enumerate(shapes)}
    return Case([_node(op, list(inputs), equation=equation)], inputs, opset=12)


FAMILIES = {
    "unary": unary(), "activation": activation(), "binary": binary(), "variadic": variadic(),
    "compare_where": compare_where(), "clip": clip(), "prelu": prelu(), "softmax": softmax(), "reduce": reduce(),
    "argmax": argmax(), "normalization": normalization(), "matmul": matmul(), "gemm": gemm(), "conv": conv(),
    "conv_transpose": conv_transpose(), "pool": pool(), "reshape": reshape(), "concat_split": concat_split(),
    "slice_gather": slice_gather(), "pad": pad(), "expand_tile": expand_tile(), "depth_space": depth_space(),
    "resize": resize(), "cast": cast(), "recurrent": recurrent(), "indexing": indexing(), "integer": integer(),
}


# --- graphs -------------------------------------------------------------------------------------


@st.composite
def cnn_graph(draw) -> Case:
    """A random chain of CNN steps on an NCHW image, with diamonds (two branches added or
    concatenated) and layout moves, to cross the borders of the blocked layout and the fusion
    table: convs (1x1, 3x3, depthwise, strided), activations, pools, resize, concat, split,
    residual adds, NHWC transposes, and a flattened dense head."""
    channels, height, width = draw(st.sampled_from([3, 8, 16, 20])), draw(st.integers(4, 12)), draw(st.integers(4, 12))
    nodes, weights = [], {}
    shape = [1, channels, height, width]
    current = "x"

    def fresh(prefix):
        return f"{prefix}{len(nodes)}"

    def conv(source, c_in, c_out, kernel=3, stride=1, group=1):
        name = fresh("conv")
        weights[f"{name}_w"] = _values(draw, (c_out, c_in // group, kernel, kernel), -0.3, 0.3)
        weights[f"{name}_b"] = _values(draw, (c_out,), -0.5, 0.5)
        nodes.append(_node("Conv", [source, f"{name}_w", f"{name}_b"], [name], kernel_shape=[kernel, kernel],
                           pads=[kernel // 2] * 4, strides=[stride, stride], group=group))
        nodes[-1].name = name
        return name

    def unary(op, source, **attrs):
        name = fresh(op.lower())
        nodes.append(_node(op, [source], [name], **attrs))
        nodes[-1].name = name
        return name

    def binary(op, a, b, **attrs):
        name = fresh(op.lower())
        nodes.append(_node(op, [a, b], [name], **attrs))
        nodes[-1].name = name
        return name

    for _ in range(draw(st.integers(2, 6))):
        c, h, w = shape[1:]
        step = draw(st.sampled_from(["conv", "conv1x1", "depthwise", "strided", "act", "pool", "resize", "concat",
                                     "residual", "nhwc", "split"]))
        if step in ("conv", "conv1x1"):
            out = draw(st.sampled_from([8, 16, 24, 32]))
            current, shape = conv(current, c, out, 3 if step == "conv" else 1), [1, out, h, w]
        elif step == "depthwise":
            current = conv(current, c, c, 3, 1, c)
        elif step == "strided" and h > 2 and w > 2:
            current = conv(current, c, c, 3, 2)
            shape = [1, c, (h + 1) // 2, (w + 1) // 2]
        elif step == "act":
            op = draw(st.sampled_from(["Relu", "Sigmoid", "HardSwish", "LeakyRelu", "Clip", "PRelu"]))
            if op == "Clip":
                weights[f"lo{len(nodes)}"], weights[f"hi{len(nodes)}"] = np.float32(0), np.float32(6)
                nodes.append(_node("Clip", [current, f"lo{len(nodes)}", f"hi{len(nodes)}"], [fresh("clip")]))
                current = nodes[-1].output[0]
            elif op == "PRelu":
                weights[f"slope{len(nodes)}"] = _values(draw, (c, 1, 1), -0.3, 0.3)
                current = binary("PRelu", current, f"slope{len(nodes)}")
            else:
                current = unary(op, current, **({"alpha": 0.1} if op == "LeakyRelu" else {}))
        elif step == "pool" and h > 1 and w > 1:
            op = draw(st.sampled_from(["MaxPool", "AveragePool"]))
            current = unary(op, current, kernel_shape=[2, 2], strides=[2, 2])
            shape = [1, c, h // 2, w // 2]
        elif step == "resize":
            weights[f"scales{len(nodes)}"] = np.array([1, 1, 2, 2], np.float32)
            mode = draw(st.sampled_from(["nearest", "linear"]))
            nodes.append(_node("Resize", [current, "", f"scales{len(nodes)}"], [fresh("resize")], mode=mode))
            current = nodes[-1].output[0]
            shape = [1, c, h * 2, w * 2]
        elif step == "concat":
            branch = conv(current, c, 8, 1)
            current = binary("Concat", current, branch, axis=1)
            shape = [1, c + 8, h, w]
        elif step == "residual":
            branch = unary("Relu", conv(current, c, c, 3))
            current = binary("Add", current, branch)
        elif step == "nhwc":  # a channels-last detour, as TF exports make
            current = unary("Transpose", unary("Relu", unary("Transpose", current, perm=[0, 2, 3, 1])),
                            perm=[0, 3, 1, 2])
        elif step == "split" and c % 2 == 0:
            halves = [fresh("half"), fresh("half") + "b"]
            nodes.append(_node("Split", [current], halves, axis=1, num_outputs=2))
            current = binary("Mul", halves[0], unary("Sigmoid", halves[1]))
            shape = [1, c // 2, h, w]
    if draw(st.booleans()):  # a classifier head
        c = shape[1]
        flat = unary("Flatten", unary("GlobalAveragePool", current))
        weights["head_w"], weights["head_b"] = _values(draw, (c, 10), -0.3, 0.3), _values(draw, (10,), -0.1, 0.1)
        current = binary("Gemm", flat, "head_w")
        nodes[-1].input.append("head_b")
    return Case(nodes, {"x": _values(draw, (1, channels, height, width), -1, 1)}, weights, opset=18)


FAMILIES["cnn_graph"] = cnn_graph()
