"""`import tvm_fuse` (the package's __init__): it loads TVM without torch, which TVM would
import where it is installed, and torch still works beside it."""

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
