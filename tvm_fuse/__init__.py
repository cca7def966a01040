"""tvm_fuse: compile ONNX models with Apache TVM into fast x86 CPU code.

    import tvm_fuse
    model = tvm_fuse.build("resnet50.onnx", target="llvm -mcpu=skylake-avx512")
    outputs = model.run(None, {"data": batch})
"""

import os as _os
import sys as _sys

# TVM imports torch as it loads, where torch is installed (apache-tvm-ffi, for a symbol clash on
# Windows; Relax, for its PyTorch interop): a second of every start and 200 MB of memory that
# tvm_fuse, which passes numpy arrays, never uses. It loads here as if torch were absent; torch
# works as before, imported before or after.
if "torch" not in _sys.modules and "tvm" not in _sys.modules:
    _sys.modules["torch"] = None  # `import torch` raises ImportError
    try:
        import tvm  # noqa: F401
    finally:
        del _sys.modules["torch"]

from .target import host_cores as _host_cores  # noqa: E402

# TVM sizes its thread pool, on first use, to half the logical CPUs on x86 (it assumes
# hyper-threading): one thread on a 2-vCPU machine. Default to every CPU we may run on.
_os.environ.setdefault("TVM_NUM_THREADS", str(_host_cores()))

from tvm.base import _RUNTIME_ONLY  # noqa: E402

from ._version import __version__  # noqa: E402
from .artifact import load
from .benchmark import Latency
from .calibration_table import CalibrationTable
from .compiled_model import CompiledModel
from .errors import (
    CompileError,
    ExportError,
    InputError,
    ModelLoadError,
    TargetError,
    TvmFuseError,
    UnsupportedOpsError,
)
from .quantization.config import QuantConfig
from .streams import Streams
from .target import host_features
from .tensor_info import TensorInfo
from .threads import set_num_threads, set_spinning

# A process that imported TVM's runtime library alone (`TVM_USE_RUNTIME_LIB=1`, 120 MB less
# than its compiler) loads and serves exported models; what compiles needs the compiler.
_COMPILING = ("build", "quantize", "parse_target")
if not _RUNTIME_ONLY:
    from .api import build
    from .calibrate import quantize
    from .target import parse_target


def __getattr__(name: str):
    if name in _COMPILING:
        raise TvmFuseError(f"tvm_fuse.{name} needs TVM's compiler, and this process imported TVM's runtime "
                           "alone (TVM_USE_RUNTIME_LIB=1): compile and export in a process without it, and "
                           "tvm_fuse.load the export here")
    raise AttributeError(f"module 'tvm_fuse' has no attribute '{name}'")


__all__ = [
    "CalibrationTable",
    "CompileError",
    "CompiledModel",
    "ExportError",
    "InputError",
    "Latency",
    "ModelLoadError",
    "QuantConfig",
    "Streams",
    "TargetError",
    "TensorInfo",
    "TvmFuseError",
    "UnsupportedOpsError",
    "__version__",
    "build",
    "host_features",
    "load",
    "parse_target",
    "quantize",
    "set_num_threads",
    "set_spinning",
]
