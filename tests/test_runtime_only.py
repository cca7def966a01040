"""A process that imported TVM's runtime alone (`TVM_USE_RUNTIME_LIB=1`) loads exported models
and runs them, with `run` and on streams, bit-identical to the process that built them, without
TVM's compiler, and refuses to build with an error that says why."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

import tvm_fuse
from tests.quantization.models import residual_block
from tests.quantization.test_int8_build import TABLE

SERVE = """
import json, sys
from pathlib import Path
import numpy as np
import tvm_fuse

folder = Path(sys.argv[1])
x = np.load(folder / "x.npy")
outputs = {}
for library in sorted(folder.glob("*.so")):
    if library.stem.endswith(".noamx"):
        continue
    model = tvm_fuse.load(library)
    (outputs[library.stem],) = model.run(None, {"x": x})
    model.set_streams(2)
    (outputs[library.stem + "_stream"],) = model.run_async(None, {"x": x}).result()
np.savez(folder / "served.npz", **outputs)
try:
    tvm_fuse.build
    refusal = None
except tvm_fuse.TvmFuseError as error:
    refusal = str(error)
maps = Path("/proc/self/maps").read_text()
print(json.dumps({"compiler_mapped": "libtvm_compiler" in maps, "refusal": refusal,
                  "modules": sorted(m for m in sys.modules if m.startswith(("tvm_fuse.", "tvm.relax", "onnx")))}))
"""

# What a serving process imports: the runtime side of tvm_fuse, nothing that compiles.
RUNTIME_MODULES = {"_native", "_version", "amx", "artifact", "benchmark", "calibration_table", "compiled_model",
                   "errors", "feed", "fusion_report", "ir_names", "outputs", "quantization", "quantization.config", "streams",
                   "target", "tensor_info", "threads", "weights_file"}


@pytest.mark.avx512
def test_a_runtime_only_process_serves_exports_bit_identical_without_the_compiler(tmp_path):
    x = np.random.default_rng(0).standard_normal((1, 32, 16, 16)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    builds = {"fp32": {}, "bf16": {"precision": "bf16"}, "int8": {"quantize": tvm_fuse.QuantConfig(calibration=TABLE)}}
    expected = {}
    for name, options in builds.items():
        model = tvm_fuse.build(residual_block(), "native", **options)
        (expected[name],) = model.run(None, {"x": x})
        model.export(tmp_path / f"{name}.so")
    done = subprocess.run([sys.executable, "-c", SERVE, str(tmp_path)], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "TVM_USE_RUNTIME_LIB": "1"})
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.strip().splitlines()[-1])
    served = np.load(tmp_path / "served.npz")
    for name, output in expected.items():
        np.testing.assert_array_equal(served[name], output)
        np.testing.assert_array_equal(served[f"{name}_stream"], output)
    assert not report["compiler_mapped"]
    assert {m.removeprefix("tvm_fuse.") for m in report["modules"]} <= RUNTIME_MODULES
    assert "TVM_USE_RUNTIME_LIB=1" in report["refusal"] and "tvm_fuse.load the export" in report["refusal"]


def test_the_command_line_says_it_needs_the_compiler():
    done = subprocess.run([sys.executable, "-c", "from tvm_fuse.cli import main; main()", "run", "model.so"],
                          capture_output=True, text=True, timeout=120, env={**os.environ, "TVM_USE_RUNTIME_LIB": "1"})
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        "tvm-fuse needs TVM's compiler, and this process loads TVM's runtime alone (TVM_USE_RUNTIME_LIB=1): "
        "unset it to run tvm-fuse; tvm_fuse.load serves exports with it set"]
