"""ONNX's own backend test data through `tvm_fuse.build`: the `onnx` wheel's pytorch-converted,
pytorch-operator and simple cases (a model, its inputs, the expected outputs), each built twice:
with `input_shapes` set to its inputs' shapes, and as declared (symbolic dims compiled as
dynamic). Each case matches its expected outputs, or is refused with UnsupportedOpsError for one
of the ops `REFUSED` lists, or with InputError for an empty input (as `run` refuses one); never
a wrong answer, never another error."""

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

import tvm_fuse
from tvm_fuse import InputError, UnsupportedOpsError

DATA = Path(onnx.__file__).parent / "backend" / "test" / "data"
CASES = sorted(case for suite in ("pytorch-converted", "pytorch-operator", "simple")
               for case in (DATA / suite).iterdir() if (case / "model.onnx").exists())
REFUSED = {
    "Gradient",  # training, not inference
    "StringNormalizer",  # strings
    "SplitToSequence",  # with split sizes computed at run time
}
RTOL = 1e-3  # of each output's largest magnitude


def _tensors(folder: Path, kind: str) -> list[onnx.TensorProto]:
    files = sorted(folder.glob(f"{kind}_*.pb"), key=lambda path: int(path.stem.split("_")[1]))
    return [onnx.load_tensor(str(path)) for path in files]


@pytest.mark.parametrize("shapes", ["fed", "declared"])
@pytest.mark.parametrize("case", CASES, ids=lambda case: f"{case.parent.name}/{case.name}")
def test_case_matches_or_is_refused(case, shapes):
    model = onnx.load(str(case / "model.onnx"))
    folder = sorted(case.glob("test_data_set_*"))[0]
    weights = {t.name for t in model.graph.initializer}
    names = [value.name for value in model.graph.input if value.name not in weights]
    feed = {tensor.name or name: numpy_helper.to_array(tensor)
            for name, tensor in zip(names, _tensors(folder, "input"))}
    expected = [numpy_helper.to_array(t) for t in _tensors(folder, "output")]
    try:
        input_shapes = {n: a.shape for n, a in feed.items()} if shapes == "fed" else None
        compiled = tvm_fuse.build(model, "native", input_shapes=input_shapes)
    except UnsupportedOpsError as refused:
        assert {node.op_type for node in refused.nodes} <= REFUSED, str(refused)
        return
    except InputError as refused:
        assert any(a.size == 0 for a in feed.values()) and "has size 0" in str(refused), str(refused)
        return
    outputs = compiled.run(None, feed)
    assert len(outputs) == len(expected)
    for index, (ours, reference) in enumerate(zip(outputs, expected)):
        assert ours.shape == reference.shape, f"output {index}"
        scale = float(np.nanmax(np.abs(reference))) if reference.size and np.isfinite(reference).any() else 1.0
        np.testing.assert_allclose(ours, reference, rtol=RTOL, atol=RTOL * scale, equal_nan=True,
                                   err_msg=f"output {index}")
