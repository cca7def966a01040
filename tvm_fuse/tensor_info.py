"""`TensorInfo`: what a model takes and returns, for the compiler and for a process that only serves."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

MAX_ELEMENTS = 2**31 - 1  # of any tensor a model builds: kernels index with int32


@dataclass(frozen=True)
class TensorInfo:
    """A model input or output as ONNX Runtime's `NodeArg` shows it: symbolic dims are names."""

    name: str
    shape: tuple[int | str, ...]
    dtype: str  # numpy name, e.g. "float32"
    # For integer inputs that index a constant table (token ids into an embedding): the table's
    # length n; values must lie in [-n, n), since compiled gathers do not check bounds.
    index_limit: int | None = None
    # Symbolic dim name -> the largest size the build assumed it takes (a table of positions
    # sliced to the sequence's length), with the node that assumed it.
    dim_limits: tuple[tuple[str, int, str], ...] = ()

    @property
    def type(self) -> str:
        """ONNX Runtime's spelling of the type, e.g. `tensor(float)`."""
        import onnx  # here: a process that serves a model needs no onnx

        onnx_type = onnx.helper.np_dtype_to_tensor_dtype(np.dtype(self.dtype))
        return f"tensor({onnx.TensorProto.DataType.Name(onnx_type).lower()})"


def symbolic_dims(inputs: list[TensorInfo]) -> str:
    """The inputs with symbolic dims and their shapes, as an error names them ("" if none)."""
    return ", ".join(f"{i.name!r}: {i.shape}" for i in inputs if any(isinstance(d, str) for d in i.shape))


def symbolic_dims_hint(inputs: list[TensorInfo]) -> str:
    """For an error building a model: that fixing its symbolic dims may avoid it ("" if none)."""
    named = symbolic_dims(inputs)
    return (f". The model's inputs have symbolic dims ({named}): building with input_shapes={{name: shape}} "
            "fixes them, which may avoid this") if named else ""
