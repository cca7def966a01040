"""A float16 model's convs, products and softmaxes compute in float32 and round once, as ONNX
Runtime does: found on a real float16 model (slovorez's morpheme segmenter, bench/corpus.py),
whose first conv summed 768 float16 products in float16 and came out 1.1e-2 from ONNX Runtime."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

import tvm_fuse
from tests.conftest import ort_outputs
from tests.differential.cases import Case
from tvm_fuse.frontend import relax_module
from tvm_fuse.transform.accumulate_half_in_float32 import AccumulateHalfInFloat32


def _half_model(op: str) -> Case:
    rng = np.random.default_rng(0)
    x = rng.uniform(0, 1, (2, 256, 12)).astype(np.float16)
    if op == "Conv":
        nodes = [helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1]),
                 helper.make_node("Softmax", ["y"], ["z"], axis=1)]
        return Case(nodes, {"x": x}, {"w": rng.uniform(-0.1, 0.1, (64, 256, 3)).astype(np.float16)}, opset=13)
    return Case([helper.make_node("MatMul", ["x", "w"], ["y"])], {"x": x},
                {"w": rng.uniform(-0.1, 0.1, (12, 64)).astype(np.float16)}, opset=13)


@pytest.mark.parametrize("op", ["Conv", "MatMul"])
def test_a_float16_model_matches_onnxruntime_within_an_ulp(op):
    case = _half_model(op)
    model = case.model()
    ours, = tvm_fuse.build(model, "llvm").run(None, case.inputs)
    reference, = ort_outputs(model, case.inputs)
    assert ours.dtype == np.float16
    # float16 has 11 significant bits: one rounding of each is 2^-11 of its magnitude
    np.testing.assert_allclose(ours, reference, rtol=0, atol=2**-10 * float(np.abs(reference).max()))


def test_float16_products_sum_in_float32():
    text = str(AccumulateHalfInFloat32()(relax_module(_half_model("Conv").model()).mod))
    assert 'out_dtype="float32"' in text and 'R.astype(x, dtype="float32")' not in text
    assert text.count('dtype="float16"') >= 2  # the conv's and the softmax's results, rounded back
