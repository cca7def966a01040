"""`import tvm_fuse` (the package's __init__): it loads TVM without torch, which TVM would
import where it is installed, and torch still works beside it; and building and running a model
import nothing of `tvm_fuse.benchmarking`."""

import importlib.util
import subprocess
import sys

import pytest


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch is not installed")
def test_importing_tvm_fuse_leaves_torch_unloaded_and_usable():
    script = ("import sys, tvm_fuse; assert 'torch' not in sys.modules, 'torch loaded'; "
              "import torch; print(float(torch.ones(3).sum()))")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "3.0"


def test_building_and_running_a_model_loads_nothing_of_the_benchmarks():
    script = """
import sys
import numpy as np
from onnx import TensorProto, helper
import tvm_fuse
graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
model = tvm_fuse.build(helper.make_model(graph), target="llvm")
x = np.array([[-1, 2, -3], [4, -5, 6]], dtype=np.float32)
assert (model.run(None, {"x": x})[0] == np.maximum(x, 0)).all()
print(sorted(m for m in sys.modules if m.startswith("tvm_fuse.benchmarking")))
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
