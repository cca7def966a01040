"""tvm_fuse: compile ONNX models with Apache TVM into fast x86 CPU code.

    import tvm_fuse
    model = tvm_fuse.build("resnet50.onnx", target="llvm -mcpu=skylake-avx512")
    outputs = model.run(None, {"data": batch})
"""

from ._version import __version__
from .api import build, load
from .benchmark import Latency
from .compiled_model import CompiledModel, set_num_threads
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
from .target import host_features, parse_target

__all__ = [
    "CompileError",
    "CompiledModel",
    "ExportError",
    "InputError",
    "Latency",
    "ModelLoadError",
    "TargetError",
    "TensorInfo",
    "TvmFuseError",
    "UnsupportedOpsError",
    "__version__",
    "build",
    "host_features",
    "load",
    "parse_target",
    "set_num_threads",
]
