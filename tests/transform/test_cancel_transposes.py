"""CancelTransposes: a transpose undone after elementwise ops (wav2vec2's feature encoder: a
GELU between a conv's output channels-first and the next conv's channels-last windows) leaves
no transpose kernel, and equals ONNX Runtime, a constant between (a bias) laid out as the
untransposed tensor; a transpose of other axes stays."""

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import tvm_fuse
from tests.conftest import assert_close, ort_outputs


def _transposed_gelu(back_perm, tensor_operand=False):
    """x [1, 24, 32] -> Transpose [0, 2, 1] -> GELU (Div, Erf, Add, Mul, Mul) [-> Add b] ->
    Transpose(back_perm) -> MatMul w."""
    rng = np.random.default_rng(0)
    out_width = 32 if back_perm == [0, 2, 1] else 1
    constants = {"root_two": np.array(np.sqrt(2), np.float32), "one": np.array(1, np.float32),
                 "half": np.array(0.5, np.float32), "b": rng.standard_normal((32, 24)).astype(np.float32),
                 "w": rng.standard_normal((out_width, 16)).astype(np.float32)}
    nodes = [helper.make_node("Transpose", ["x"], ["t"], name="to_channels_first", perm=[0, 2, 1]),
             helper.make_node("Div", ["t", "root_two"], ["d"], name="gelu_div"),
             helper.make_node("Erf", ["d"], ["e"], name="gelu_erf"),
             helper.make_node("Add", ["e", "one"], ["a"], name="gelu_add"),
             helper.make_node("Mul", ["t", "a"], ["m"], name="gelu_mul"),
             helper.make_node("Mul", ["m", "half"], ["g"], name="gelu_half")]
    last = "g"
    if tensor_operand:
        nodes.append(helper.make_node("Add", ["g", "b"], ["biased"], name="bias"))
        last = "biased"
    nodes += [helper.make_node("Transpose", [last], ["back"], name="to_channels_last", perm=back_perm),
              helper.make_node("MatMul", ["back", "w"], ["y"], name="dense")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 24, 32])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None] * 3)],
                              [numpy_helper.from_array(v, k) for k, v in constants.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    return model


@pytest.mark.parametrize("back_perm, tensor_operand, cancelled", [
    ([0, 2, 1], False, True),
    ([2, 1, 0], False, False),  # not the inverse
    ([0, 2, 1], True, True),  # a constant bias of the channels-first shape between: transposed back
])
def test_a_transpose_undone_after_a_gelu_leaves_no_transpose(back_perm, tensor_operand, cancelled):
    model = _transposed_gelu(back_perm, tensor_operand)
    compiled = tvm_fuse.build(model, "native")
    x = np.random.default_rng(1).standard_normal((1, 24, 32)).astype(np.float32)
    assert_close(compiled.run(None, {"x": x}), ort_outputs(model, {"x": x}))
    running = {u["onnx_node"] for u in compiled.fusion_report()["unfused"] if u["op_type"] == "Transpose"}
    assert (running == set()) == cancelled
