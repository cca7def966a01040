"""tvm_fuse: compile ONNX models with Apache TVM into fast x86 CPU code.

    import tvm_fuse
    model = tvm_fuse.build("resnet50.onnx", target="llvm -mcpu=skylake-avx512")
    outputs = model.run(None, {"data": batch})
"""

import os as _os

from .target import host_cores as _host_cores

# TVM sizes its thread pool, on first use, to half the logical CPUs on x86 (it assumes
# hyper-threading): one thread on a 2-vCPU machine. Default to every CPU we may run on.
_os.environ.setdefault("TVM_NUM_THREADS", str(_host_cores()))

from ._version import __version__  # noqa: E402
from .api import build, load
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
from .frontend.importer import TensorInfo
from .quantization.calibrate import quantize
from .quantization.config import QuantConfig
from .target import host_features, parse_target
from .threads import set_num_threads, set_spinning

__all__ = [
    "CalibrationTable",
    "CompileError",
    "CompiledModel",
    "ExportError",
    "InputError",
    "Latency",
    "ModelLoadError",
    "QuantConfig",
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
