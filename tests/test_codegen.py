"""Kernels compiled on every core (`tvm_fuse.codegen`): each kernel in exactly one of the
modules, the modules joined into one executable that runs them all, exported and loaded too."""

from __future__ import annotations

import numpy as np
import pytest
import tvm
from tvm import tirx

import tvm_fuse
from tests.conftest import AVX512_TARGET, assert_close, ort_outputs
from tvm_fuse.benchmarking.models import named_model
from tvm_fuse.codegen import _kernel_modules, llvm_modules


def test_each_kernel_goes_to_exactly_one_module():
    kernels = {f"k{i}": tirx.PrimFunc([], tirx.Evaluate(0)) for i in range(5)}
    mod = tvm.IRModule(kernels)
    parts = _kernel_modules(mod, 2)
    names = [gvar.name_hint for part in parts for gvar in part.get_global_vars()]
    assert len(parts) == 2 and sorted(names) == sorted(kernels)
    assert len(_kernel_modules(tvm.IRModule({"k": kernels["k0"]}), 4)) == 1  # no empty modules


def _squeezenet_on_two_cores(monkeypatch):
    monkeypatch.setattr("tvm_fuse.codegen.host_cores", lambda: 2)
    model = named_model("squeezenet", batch=1)
    return model, tvm_fuse.build(model, AVX512_TARGET)


def test_a_model_on_two_cores_is_one_executable_of_two_kernel_modules(monkeypatch):
    _, built = _squeezenet_on_two_cores(monkeypatch)
    assert len(llvm_modules(built._library.mod)) == 2


@pytest.mark.avx512
def test_a_model_compiled_on_two_cores_runs_and_exports(tmp_path, monkeypatch):
    model, built = _squeezenet_on_two_cores(monkeypatch)
    feed = {built.get_inputs()[0].name: np.random.default_rng(0).standard_normal((1, 3, 224, 224)).astype(np.float32)}
    loaded = tvm_fuse.load(built.export(tmp_path / "squeezenet.so"))
    assert_close(built.run(None, feed), ort_outputs(model, feed))
    assert np.array_equal(loaded.run(None, feed)[0], built.run(None, feed)[0])


def test_a_weight_several_calls_read_is_one_tensor_and_one_entry_of_the_export(tmp_path):
    """An unrolled recurrence reads one weight at every step; each step's kernel gets its own
    packed copy, which must not stay a copy each (a CRNN's 20 MB of weights were 275 MB, and
    each step read its own copy from memory)."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    weight = numpy_helper.from_array(rng.standard_normal((64, 64)).astype(np.float32), "w")
    other = numpy_helper.from_array(rng.standard_normal((64, 64)).astype(np.float32), "v")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h1"]), helper.make_node("Tanh", ["h1"], ["t1"]),
             helper.make_node("MatMul", ["t1", "w"], ["h2"]), helper.make_node("Tanh", ["h2"], ["t2"]),
             helper.make_node("MatMul", ["t2", "w"], ["h3"]), helper.make_node("MatMul", ["h3", "v"], ["y"])]
    graph = helper.make_graph(nodes, "steps", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 64])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 64])], [weight, other])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    built = tvm_fuse.build(model)
    assert len(built._weights) == 2, [w.shape for w in built._weights]  # w once, v once
    feed = {"x": rng.standard_normal((4, 64)).astype(np.float32)}
    assert_close(built.run(None, feed), ort_outputs(model, feed))
    built.export(tmp_path / "steps.so")
    assert_close(tvm_fuse.load(tmp_path / "steps.so").run(None, feed), ort_outputs(model, feed))
