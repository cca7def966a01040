"""Pre-quantized ONNX models (QDQ: QuantizeLinear / DequantizeLinear pairs, as ONNX Runtime's
quantization tool and PyTorch's exporter write them) read as a float graph plus a table of
the scales its pairs give, so they run on the same int8 kernels as a model we calibrated.

- A DequantizeLinear of constant codes (weights, int32 biases) becomes the float constant it
  stands for; the int8 kernel quantizes it again per output channel, which gives back the
  same codes for symmetric per-channel s8 weights (ONNX Runtime's), else the nearest ones.
- An activation's QuantizeLinear -> DequantizeLinear pair with one scale (per tensor) goes; its
  scale and zero point are kept, as u8 (s8 codes shifted by 128: the same grid), under the name
  of the tensor its readers now read. Where the pair's grid starts at 0 it also stood for a
  ReLU or ReLU6 that ONNX Runtime removed, so a Clip to the grid's range takes its place.
  That holds for the readers that round the tensor again (`_RoundsAgain`): the int8 kernels of
  convs and dense layers, and moves, pools and residual adds on the way to one or to another
  pair (a CNN's output lands a code from ONNX Runtime's, as ONNX Runtime's own does when its
  inputs move by 1e-6). Any other reader (a Softmax, a MatMul of two activations, the Add of a
  bias after a MatMul) reads the pair itself, computed in float: there the rounding is the
  model's arithmetic (attention probabilities on 256 codes): reading those tensors unrounded
  put a QDQ transformer's output (pipecat's smart-turn) 7.9e-3 from ONNX Runtime's, where 1e-6
  moves of its inputs move ONNX Runtime's by 1.8e-3.
- Anything else (per-axis activation scales, int8 graph inputs or outputs) stays as it is and
  runs as float math.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

from ..calibration_table import CalibrationTable, TensorScale
from .fixups import constant_values

METHOD = "qdq"  # a table read from the model's own pairs
# Ops whose output is non-negative when their data inputs are.
_ORDER_PRESERVING = {"MaxPool", "AveragePool", "GlobalMaxPool", "GlobalAveragePool", "Reshape", "Flatten",
                     "Transpose", "Squeeze", "Unsqueeze", "Concat", "Identity"}
_CODE_RANGES = {np.dtype(np.uint8): (0, 255), np.dtype(np.int8): (-128, 127)}
# Ops that move, pick, pool or add values: where an int8 kernel or another pair rounds their
# result again, reading their input unrounded moves that result by a code at most.
_BEFORE_ROUNDING = _ORDER_PRESERVING | {"Relu", "Clip", "Add"}


def is_qdq(model: onnx.ModelProto) -> bool:
    return any(node.op_type in ("QuantizeLinear", "DequantizeLinear") for node in model.graph.node)


def read_qdq(model: onnx.ModelProto) -> tuple[onnx.ModelProto, CalibrationTable | None]:
    """(`model` as a float graph, the scales of its activation pairs), or (`model`, None) when
    it holds no QuantizeLinear / DequantizeLinear. The input is not changed."""
    if not is_qdq(model):
        return model, None
    graph = model.graph
    constants = constant_values(graph)
    folded = _fold_constant_codes(graph, constants)
    consumers: dict[str, list[onnx.NodeProto]] = {}
    for node in graph.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node)
    outputs = {o.name for o in graph.output}
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)

    renamed: dict[str, str] = {}  # a pair's dequantized tensor -> the float tensor replacing it
    replaced: dict[int, list[onnx.NodeProto]] = {}  # id(node) -> the nodes standing in its place
    kept_pairs: dict[int, set[str]] = {}  # id(reader) -> dequantized tensors it reads as they are
    rounds_again = _RoundsAgain(consumers, constants, outputs)
    bounds: list[onnx.TensorProto] = []
    tensors: dict[str, TensorScale] = {}
    non_negative: set[str] = set()
    for node in graph.node:
        if _non_negative(node, constants, non_negative, renamed):
            non_negative.add(node.output[0])
        pair = _activation_pair(node, consumers, constants, outputs)
        if pair is None:
            continue
        dequantizes, scale, zero_point, (low_code, high_code) = pair
        others = {d.output[0]: [r for r in consumers.get(d.output[0], []) if not rounds_again(r)] for d in dequantizes}
        if all(len(others[d.output[0]]) == len(consumers.get(d.output[0], [])) for d in dequantizes):
            continue  # every reader reads the pair: it stays as it is
        keeps_pair = any(others.values())
        replaced[id(node)] = [node] if keeps_pair else []
        replacement = node.input[0]
        if zero_point == low_code and renamed.get(node.input[0], node.input[0]) not in non_negative:
            replacement = f"{node.output[0]}/relu" if keeps_pair else node.output[0]
            high = scale * (high_code - zero_point)
            replaced[id(node)].append(_clip(replacement if keeps_pair else node.name or replacement, node.input[0],
                                            replacement, high, opset, bounds))
        tensors[replacement] = TensorScale(scale, zero_point - low_code)
        if zero_point == low_code:
            non_negative.add(replacement)
        for dequantize in dequantizes:
            replaced[id(dequantize)] = [dequantize] if others[dequantize.output[0]] else []
            renamed[dequantize.output[0]] = replacement
            for reader in others[dequantize.output[0]]:
                kept_pairs.setdefault(id(reader), set()).add(dequantize.output[0])

    result = onnx.ModelProto()
    result.CopyFrom(model)
    del result.graph.node[:]
    for node in graph.node:
        if node.output[0] in folded:
            continue
        for kept in replaced.get(id(node), [node]):
            copy = result.graph.node.add()
            copy.CopyFrom(kept)
            as_read = kept_pairs.get(id(node), set())
            copy.input[:] = [name if name in as_read else renamed.get(name, name) for name in kept.input]
    used = {name for node in result.graph.node for name in node.input} | outputs
    initializers = [t for t in graph.initializer if t.name in used and t.name not in folded]
    initializers += [numpy_helper.from_array(v, name) for name, v in folded.items() if name in used]
    initializers += [t for t in bounds if t.name in used]
    del result.graph.initializer[:]
    result.graph.initializer.extend(initializers)
    weights = {t.name for t in graph.initializer}  # old IRs list them as graph inputs too
    kept_inputs = [i for i in graph.input if i.name in used or i.name not in weights]
    del result.graph.input[:]
    result.graph.input.extend(kept_inputs)
    return result, CalibrationTable(tensors, METHOD) if tensors else None


def _attribute(node: onnx.NodeProto, name: str, default):
    for attribute in node.attribute:
        if attribute.name == name:
            return helper.get_attribute_value(attribute)
    return default


def _per_axis(node: onnx.NodeProto, value: np.ndarray, rank: int) -> np.ndarray:
    """A scale or zero point shaped to broadcast along the node's axis."""
    if value.ndim == 0 or rank == 0:
        return value
    shape = [1] * rank
    shape[_attribute(node, "axis", 1) % rank] = value.size
    return value.reshape(shape)


def _zero_point(node: onnx.NodeProto, constants, dtype=np.uint8) -> np.ndarray | None:
    if len(node.input) > 2 and node.input[2]:
        return constants.get(node.input[2])
    return np.zeros((), dtype)  # ONNX's default: u8 codes with zero point 0


def _fold_constant_codes(graph: onnx.GraphProto, constants: dict) -> dict[str, np.ndarray]:
    """Float values of QuantizeLinear / DequantizeLinear nodes whose inputs are all constant
    (weights and biases, quantized or fake-quantized), in graph order; `constants` gains them."""
    folded = {}
    for node in graph.node:
        if node.op_type not in ("QuantizeLinear", "DequantizeLinear") or _attribute(node, "block_size", 0):
            continue
        if not all(name in constants for name in node.input if name):
            continue
        x, scale = constants[node.input[0]], constants[node.input[1]].astype(np.float32)
        if node.op_type == "DequantizeLinear":
            zero_point = _zero_point(node, constants, x.dtype)
            value = (x.astype(np.float32) - _per_axis(node, zero_point, x.ndim).astype(np.float32)) \
                * _per_axis(node, scale, x.ndim)
        else:
            zero_point = _zero_point(node, constants)
            low, high = _CODE_RANGES.get(zero_point.dtype, (None, None))
            if low is None:
                continue
            codes = np.rint(x / _per_axis(node, scale, x.ndim)) + _per_axis(node, zero_point, x.ndim).astype(np.float32)
            value = np.clip(codes, low, high).astype(zero_point.dtype)
        constants[node.output[0]] = folded[node.output[0]] = value
    return folded


def _activation_pair(node, consumers, constants, outputs):
    """(its DequantizeLinear readers, scale, zero point, (lowest, highest) code) when `node`
    quantizes a computed tensor with one scale, and only DequantizeLinear nodes of the same
    scale and zero point read it, none a graph output; else None."""
    if node.op_type != "QuantizeLinear" or node.input[0] in constants or node.output[0] in outputs:
        return None
    scale, zero_point = constants.get(node.input[1]), _zero_point(node, constants)
    if scale is None or zero_point is None or scale.size != 1 or zero_point.size != 1:
        return None
    codes = _CODE_RANGES.get(zero_point.dtype)
    readers = consumers.get(node.output[0], [])
    if codes is None or not readers or not float(scale.reshape(())) > 0:
        return None
    for reader in readers:
        if (reader.op_type != "DequantizeLinear" or reader.input[0] != node.output[0]
                or reader.output[0] in outputs
                or not np.array_equal(constants.get(reader.input[1]), scale)
                or not np.array_equal(_zero_point(reader, constants), zero_point)):
            return None
    return readers, float(scale.reshape(())), int(zero_point.reshape(())), codes


class _RoundsAgain:
    """Whether a reader of a pair's dequantized tensor rounds it again before any other op reads
    it: a conv or dense layer (its int8 kernel quantizes its input on the pair's scale), a pair, or one
    of `_BEFORE_ROUNDING` whose every reader does so."""

    def __init__(self, consumers, constants, outputs):
        self.consumers, self.constants, self.outputs = consumers, constants, outputs
        self.known: dict[int, bool] = {}

    def __call__(self, node: onnx.NodeProto) -> bool:
        if id(node) not in self.known:
            self.known[id(node)] = False  # a cycle (none in a valid graph) rounds nothing
            self.known[id(node)] = self._rounds(node)
        return self.known[id(node)]

    def _rounds(self, node: onnx.NodeProto) -> bool:
        if node.op_type in ("Conv", "Gemm", "QuantizeLinear"):
            return True
        if node.op_type == "MatMul":  # a dense layer: its weights are constant
            return len(node.input) > 1 and node.input[1] in self.constants
        if node.op_type not in _BEFORE_ROUNDING:
            return False
        if node.op_type == "Add" and any(name in self.constants for name in node.input):
            return False  # a bias after a MatMul: shifted off the grid, it rounds elsewhere
        return all(name not in self.outputs and self.consumers.get(name) and all(map(self, self.consumers[name]))
                   for name in node.output)


def _non_negative(node, constants, non_negative: set[str], renamed: dict[str, str]) -> bool:
    """The node's output is never negative: a Relu, a Clip from 0 or above, or an op that
    only moves, picks or averages values of non-negative inputs."""
    if node.op_type == "Relu":
        return True
    if node.op_type == "Clip":
        low = constants.get(node.input[1]) if len(node.input) > 1 and node.input[1] else None
        low = _attribute(node, "min", None) if low is None else float(low)
        return low is not None and low >= 0
    data = node.input if node.op_type == "Concat" else node.input[:1]
    return node.op_type in _ORDER_PRESERVING and all(renamed.get(n, n) in non_negative for n in data)


def _clip(name: str, source: str, output: str, high: float, opset: int,
          bounds: list[onnx.TensorProto]) -> onnx.NodeProto:
    """Clip(source) to [0, high]; opsets before 11 take the bounds as attributes."""
    if opset < 11:
        return helper.make_node("Clip", [source], [output], name=name, min=0.0, max=high)
    names = [f"{output}_clip_low", f"{output}_clip_high"]
    bounds += [numpy_helper.from_array(np.array(0.0, np.float32), names[0]),
               numpy_helper.from_array(np.array(high, np.float32), names[1])]
    return helper.make_node("Clip", [source, *names], [output], name=name)
