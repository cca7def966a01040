"""Which functions each narrow precision rewrites: RealizeBf16 every graph function, If branches
included (a branch needs no scales); RealizeInt8 `main` alone, since calibration measures the
tensors of `main` only, and a branch's convs stay fp32."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import tvm_fuse
from tests.conftest import ort_outputs
from tvm_fuse.target import host_cpu, vector_lanes
from tvm_fuse.transform.realize.bf16 import RealizeBf16

CHANNELS = 16


def _model():
    """x -> conv + relu (main) -> If(cond): conv + relu | conv + sigmoid."""
    rng = np.random.default_rng(0)

    def conv(prefix, source, activation, output):
        return [helper.make_node("Conv", [source, f"{prefix}_w", f"{prefix}_b"], [f"{prefix}_c"],
                                 name=f"{prefix}_conv", pads=[1, 1, 1, 1]),
                helper.make_node(activation, [f"{prefix}_c"], [output], name=f"{prefix}_act")]

    weights = [array for prefix in ("m", "t", "e") for array in (
        numpy_helper.from_array(rng.normal(0, 0.2, (CHANNELS, CHANNELS, 3, 3)).astype(np.float32), f"{prefix}_w"),
        numpy_helper.from_array(rng.normal(0, 0.1, CHANNELS).astype(np.float32), f"{prefix}_b"))]
    out = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, CHANNELS, 8, 8])
    pick = helper.make_node("If", ["cond"], ["y"], name="pick",
                            then_branch=helper.make_graph(conv("t", "m", "Relu", "y"), "then", [], [out]),
                            else_branch=helper.make_graph(conv("e", "m", "Sigmoid", "y"), "else", [], [out]))
    graph = helper.make_graph(conv("m", "x", "Relu", "m") + [pick], "scope",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, CHANNELS, 8, 8]),
                               helper.make_tensor_value_info("cond", TensorProto.BOOL, [])], [out], weights)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    return model


def _precisions(model) -> dict[str, str]:
    """Each conv's kernel precision, by the conv's node name."""
    return {node: kernel["precision"] for kernel in model.fusion_report()["kernels"]
            for node in kernel["onnx_nodes"] if node.endswith("_conv")}


def _feed(seed: int, cond: bool) -> dict:
    return {"x": np.random.default_rng(seed).standard_normal((1, CHANNELS, 8, 8)).astype(np.float32),
            "cond": np.array(cond)}


def test_bf16_rewrites_main_and_every_branch(monkeypatch):
    monkeypatch.setattr("tvm_fuse.api.bf16_pass", lambda precision, target:
                        RealizeBf16(vector_lanes(target), native=False) if precision == "bf16" else None)
    model = _model()
    built = tvm_fuse.build(model, f"llvm -mcpu={host_cpu()} -mattr=-amx-tile,-amx-int8,-amx-bf16", precision="bf16")
    assert _precisions(built) == {"m_conv": "bf16", "t_conv": "bf16", "e_conv": "bf16"}
    for cond in (True, False):
        (ours,), (reference,) = built.run(None, _feed(1, cond)), ort_outputs(model, _feed(1, cond))
        np.testing.assert_allclose(ours, reference, atol=0.03 * np.abs(reference).max())


@pytest.mark.vnni
def test_int8_rewrites_main_alone():
    model = _model()
    table = tvm_fuse.quantize(model, [_feed(seed, seed % 2 == 0) for seed in range(4)], method="minmax")
    built = tvm_fuse.build(model, quantize=tvm_fuse.QuantConfig(calibration=table))
    assert _precisions(built) == {"m_conv": "int8", "t_conv": "fp32", "e_conv": "fp32"}
    for cond in (True, False):
        (ours,), (reference,) = built.run(None, _feed(1, cond)), ort_outputs(model, _feed(1, cond))
        np.testing.assert_allclose(ours, reference, atol=0.05 * np.abs(reference).max())
