"""SymbolicReshapesAsViews: a reshape of symbolic shape runs as the VM's view of the same bytes,
no copy kernel."""

import numpy as np
from onnx import TensorProto, helper, numpy_helper

import tvm_fuse
from tests.conftest import AVX512_TARGET, assert_close, ort_outputs
from tvm_fuse.frontend.importer import import_onnx
from tvm_fuse.pipeline import lowered, optimize
from tvm_fuse.target import parse_target


def _heads_model():
    """x [batch, tokens, 64] split into 4 heads of 16 and back (Reshape, Transpose, Reshape),
    the way an attention block lays out its heads, with an Exp between; symbolic dims."""
    nodes = [helper.make_node("Reshape", ["x", "heads"], ["split"], name="split"),
             helper.make_node("Transpose", ["split"], ["swapped"], perm=[0, 2, 1, 3]),
             helper.make_node("Exp", ["swapped"], ["e"]),
             helper.make_node("Transpose", ["e"], ["back"], perm=[0, 2, 1, 3]),
             helper.make_node("Reshape", ["back", "joined"], ["y"], name="join")]
    graph = helper.make_graph(
        nodes, "heads", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "tokens", 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.array([0, 0, 4, 16], np.int64), "heads"),
         numpy_helper.from_array(np.array([0, 0, 64], np.int64), "joined")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_symbolic_reshapes_are_views():
    model = _heads_model()
    target = parse_target(AVX512_TARGET)
    with target:
        mod = lowered(optimize(import_onnx(model), target), target, model)
    kernels = [gvar.name_hint for gvar, _ in mod.functions_items() if gvar.name_hint != "main"]
    assert not any("reshape" in name for name in kernels), kernels
    assert mod["main"].script().count('"vm.builtin.reshape"') == 2
    compiled = tvm_fuse.build(model, AVX512_TARGET)
    for size in [(1, 7, 64), (3, 33, 64)]:
        feed = {"x": np.random.default_rng(0).standard_normal(size).astype(np.float32)}
        assert_close(compiled.run(None, feed), ort_outputs(model, feed))
