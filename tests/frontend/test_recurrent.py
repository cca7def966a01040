"""LSTM and GRU (frontend/recurrent.py) against ONNX Runtime, or ONNX's reference implementation
for the batch-first layout ONNX Runtime does not run: every direction, with and without
initial states and biases, peepholes and clip, GRU's linear_before_reset."""

import re

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import tvm_fuse
from tests.conftest import assert_close, ort_outputs

SEQ, BATCH, INPUT, HIDDEN = 5, 2, 3, 4


def _recurrent_model(op, direction="forward", layout=0, states=True, bias=True, peepholes=False,
                     linear_before_reset=0, clip=None, seed=0, hidden=HIDDEN, batch=BATCH, seq=SEQ, scale=0.5,
                     features=INPUT):
    """One `op` node (weights normal times `scale`); returns the model and a feed for its inputs."""
    rng = np.random.default_rng(seed)
    directions, gates = 2 if direction == "bidirectional" else 1, {"LSTM": 4, "GRU": 3}[op]

    def weight(name, *shape):
        weights.append(numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32) * scale, name))
        return name

    weights = []
    inputs = ["x", weight("W", directions, gates * hidden, features), weight("R", directions, gates * hidden, hidden),
              weight("B", directions, 2 * gates * hidden) if bias else "", ""]
    x_shape = [seq, batch, features] if layout == 0 else [batch, seq, features]
    state_shape = [directions, batch, hidden] if layout == 0 else [batch, directions, hidden]
    fed = {"x": x_shape}
    state_names = ["h0", "c0"] if op == "LSTM" else ["h0"]
    for name in state_names:
        inputs.append(name if states else "")
        if states:
            fed[name] = state_shape
    if peepholes:
        inputs.append(weight("P", directions, 3 * hidden))
    while inputs[-1] == "":
        inputs.pop()
    outputs = ["Y", "Y_h"] + (["Y_c"] if op == "LSTM" else [])
    attrs = {"hidden_size": hidden, "direction": direction, "layout": layout}
    if op == "GRU":
        attrs["linear_before_reset"] = linear_before_reset
    if clip is not None:
        attrs["clip"] = clip
    graph = helper.make_graph(
        [helper.make_node(op, inputs, outputs, name="rnn", **attrs)], "rnn",
        [helper.make_tensor_value_info(name, TensorProto.FLOAT, shape) for name, shape in fed.items()],
        [helper.make_tensor_value_info(name, TensorProto.FLOAT, [None] * (4 if name == "Y" else 3)) for name in outputs],
        weights)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
    model.ir_version = 9
    return model, {name: rng.standard_normal(shape).astype(np.float32) for name, shape in fed.items()}


@pytest.mark.parametrize("op, options", [
    ("LSTM", {}),
    ("LSTM", {"direction": "reverse"}),
    ("LSTM", {"direction": "bidirectional"}),
    ("LSTM", {"direction": "bidirectional", "layout": 1}),
    ("LSTM", {"states": False, "bias": False}),
    ("LSTM", {"peepholes": True, "clip": 1.5}),
    ("GRU", {}),
    ("GRU", {"linear_before_reset": 1, "direction": "bidirectional"}),
    ("GRU", {"direction": "bidirectional", "layout": 1}),
    ("GRU", {"states": False, "bias": False, "direction": "reverse"}),
    ("GRU", {"clip": 1.5, "linear_before_reset": 1}),  # a dense layer per step, not the kernel
], ids=str)
def test_matches_the_reference(op, options):
    model, feed = _recurrent_model(op, **options)
    # ONNX Runtime refuses layout 1 ("batchwise recurrent operations are not supported").
    reference = ReferenceEvaluator(model).run(None, feed) if options.get("layout") else ort_outputs(model, feed)
    assert_close(tvm_fuse.build(model, "native").run(None, feed), reference)


def test_a_sequence_length_known_only_at_run_time_is_refused_by_name():
    model, _ = _recurrent_model("LSTM")
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "seq"
    with pytest.raises(tvm_fuse.CompileError, match=r"'rnn' \(op LSTM.*sequence length computed at run time"):
        tvm_fuse.build(model, "native")


@pytest.mark.parametrize("op", ["LSTM", "GRU"])
def test_a_step_reads_its_gates_in_place(op):
    """The gates are slices fused into the elementwise kernels that read them: no step splits
    them into tensors of their own (a kernel and a tuple per step, as an LSTM once did)."""
    model, _ = _recurrent_model(op, direction="bidirectional")
    assert "split" not in tvm_fuse.build(model, "native").assembly()


@pytest.mark.parametrize("op, linear_before_reset", [("LSTM", 0), ("GRU", 0), ("GRU", 1)])
@pytest.mark.parametrize("hidden, batch, seq, kernels", [(24, 3, SEQ, 1), (5, 1, SEQ, 1), (256, 1, SEQ, 0),
                                                        (8, 1, 40, 1), (100, 1, 600, 1)])
def test_a_small_recurrence_runs_as_one_kernel(op, linear_before_reset, hidden, batch, seq, kernels):
    """A bidirectional recurrence with the default activations whose steps are small runs as
    one kernel over the whole sequence, however long (a loop over time: an EEG model's 600
    steps of 100), its two directions in parallel (gate columns a vector, a half or a quarter
    of one wide, batch rows in pairs or alone); a large one keeps a dense layer per step. All
    match ONNX Runtime."""
    # Weights of a trained model's scale: with the others' 0.5 a 100-wide state is chaotic, and
    # 600 steps amplify any rounding difference from ONNX Runtime's.
    model, feed = _recurrent_model(op, direction="bidirectional", hidden=hidden, batch=batch, seq=seq,
                                   scale=min(0.5, 1 / hidden ** 0.5), linear_before_reset=linear_before_reset)
    compiled = tvm_fuse.build(model, "native")
    assert_close(compiled.run(None, feed), ort_outputs(model, feed))
    name = op.lower()
    assert len(re.findall(rf"^__tvm_ffi_{name}\d*:", compiled.assembly(), re.MULTILINE)) == kernels
