"""Shared test helpers: ONNX Runtime as the reference, and markers gated on the host's ISA."""

from __future__ import annotations

import numpy as np
import pytest

from tvm_fuse import host_features
from tvm_fuse.benchmarking.compare import onnxruntime_session

# The target the product promises; tests that execute its code need an AVX-512 host.
AVX512_TARGET = "llvm -mcpu=skylake-avx512 -num-cores=2"

_HOST = host_features()
_GATES = {
    "avx2": ({"avx2", "fma"}, "host CPU lacks AVX2/FMA"),
    "avx512": ({"avx512f", "avx512bw", "avx512vl"}, "host CPU lacks AVX-512 F/BW/VL"),
    "vnni": ({"avx512_vnni"}, "host CPU lacks AVX512-VNNI"),
    "bf16": ({"avx512_bf16"}, "host CPU lacks AVX512-BF16"),
    # host_features() has AMX only where the OS also lets this process use it (tvm_fuse.amx)
    "amx": ({"amx", "amx_bf16"}, "host CPU lacks AMX-INT8/AMX-BF16, or the OS does not permit it"),
}


def pytest_collection_modifyitems(config, items):
    for item in items:
        for marker, (needed, reason) in _GATES.items():
            # A marker, not a keyword: keywords hold directory names too (this checkout's "amx").
            if item.get_closest_marker(marker) is not None and not needed <= _HOST:
                item.add_marker(pytest.mark.skip(reason=f"{reason} (has {sorted(_HOST)})"))


def ort_outputs(model, feed: dict) -> list[np.ndarray]:
    """ONNX Runtime's outputs for `feed`: the reference every numeric test compares with."""
    return onnxruntime_session(model, num_threads=2).run(None, feed)


def assert_close(ours: list[np.ndarray], reference: list[np.ndarray], rtol: float = 1e-4):
    """Each output equals the reference elementwise within `rtol` of that output's largest
    magnitude (fp32 kernels that sum in another order differ by rounding only)."""
    assert len(ours) == len(reference)
    for index, (a, b) in enumerate(zip(ours, reference)):
        assert a.shape == b.shape, f"output {index}: shape {a.shape} != reference {b.shape}"
        assert a.dtype == b.dtype, f"output {index}: dtype {a.dtype} != reference {b.dtype}"
        scale = float(np.max(np.abs(b))) if b.size else 1.0
        np.testing.assert_allclose(a, b, rtol=rtol, atol=rtol * scale, err_msg=f"output {index}")


# Ops that a conv / fc kernel's epilogue absorbs: none may be left to run on its own.
POST_OPS = {"Relu", "Clip", "Add", "Sum", "BatchNormalization"}


def assert_fully_fused(model, report: dict):
    """Every Conv is inside a fused kernel, no post-op runs as a kernel of its own, and every
    ONNX node is accounted for exactly once."""
    fused = [n for k in report["kernels"] for n in k["onnx_nodes"]]
    unfused = [u["onnx_node"] for u in report["unfused"]]
    folded = [f["onnx_node"] for f in report["folded"]]
    labels = [n.name or f"{n.op_type}#{i}" for i, n in enumerate(model.graph.node)]  # as build() names them
    assert sorted(fused + unfused + folded) == sorted(labels)
    convs = {label for label, n in zip(labels, model.graph.node) if n.op_type == "Conv"}
    assert convs <= set(fused), f"convs outside kernels: {sorted(convs - set(fused))}"
    left = [u for u in report["unfused"] if u["op_type"] in POST_OPS]
    assert not left, f"post-ops left unfused: {left}"


def random_inputs(shapes: dict[str, tuple], seed: int = 0) -> dict:
    """Standard-normal float inputs of the given shapes."""
    rng = np.random.default_rng(seed)
    return {name: rng.standard_normal(shape).astype(np.float32) for name, shape in shapes.items()}


def tiny_model(batch="batch", op="Relu", opset=17):
    """x[batch, 4] -> MatMul with a constant -> `op` -> y: compiles in about a second."""
    from onnx import TensorProto, helper, numpy_helper

    weight = numpy_helper.from_array(np.arange(16, dtype=np.float32).reshape(4, 4) / 16, "w")
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["x", "w"], ["h"], name="matmul"),
            helper.make_node(op, ["h"], ["y"], name="act"),
        ],
        "tiny",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 4])],
        [weight],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 9
    return model


def conv_model(shape: tuple, out_channels: int, kernel: int = 1, stride: int = 1, group: int = 1, relu: bool = True):
    """x[shape] (NCHW) -> Conv with a bias, `kernel` x `kernel` padded by half of it, `stride`,
    `group` -> Relu if `relu` -> y."""
    from onnx import TensorProto, helper, numpy_helper

    batch, channels, height, width = shape
    rng = np.random.default_rng(0)
    weights = [numpy_helper.from_array(rng.standard_normal((out_channels, channels // group, kernel, kernel))
                                       .astype(np.float32), "w"),
               numpy_helper.from_array(rng.standard_normal(out_channels).astype(np.float32), "b")]
    pad = kernel // 2
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", kernel_shape=[kernel, kernel],
                              pads=[pad] * 4, strides=[stride, stride], group=group)]
    if relu:
        nodes.append(helper.make_node("Relu", ["c"], ["y"], name="relu"))
    out_shape = [batch, out_channels, *((size + 2 * pad - kernel) // stride + 1 for size in (height, width))]
    graph = helper.make_graph(nodes, "conv", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
                              [helper.make_tensor_value_info(nodes[-1].output[0], TensorProto.FLOAT, out_shape)],
                              weights)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


def dense_model(rows: tuple, k: int, n: int, seed: int = 0):
    """x[*rows, k] -> MatMul with a constant [k, n] -> Relu -> y: one dense kernel."""
    from onnx import TensorProto, helper, numpy_helper

    weight = numpy_helper.from_array(np.random.default_rng(seed).standard_normal((k, n)).astype(np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["h"], name="dense"),
         helper.make_node("Relu", ["h"], ["y"], name="relu")],
        "dense",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [*rows, k])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [*rows, n])],
        [weight],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    return model
