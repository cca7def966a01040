"""Every op family the frontend accepts, drawn at random over its attributes, opsets and
broadcasting (`cases.FAMILIES`), built through the whole pipeline and compared with ONNX Runtime
(where it approximates, with ONNX's reference evaluator): with static shapes, with axis 0 symbolic
(compiled as dynamic) and with every axis symbolic, fusion on and off, and the
families with convs and products in bf16 too, where the host has AVX512-BF16. Each case matches
within 1e-4 of each output's largest magnitude (bf16: 3e-2), or is refused: as unsupported, or by
an import error that names the node; never a wrong answer, never another error.

The suite draws `EXAMPLES` cases per family, the same ones each run; a longer, random run:
`TVM_FUSE_DIFFERENTIAL_EXAMPLES=200 pytest tests/differential` (docs/development.md)."""

from __future__ import annotations

import os

import numpy as np
import onnx
import pytest
from hypothesis import HealthCheck, given, reject, settings
from hypothesis import strategies as st
from onnx.reference import ReferenceEvaluator

import tvm_fuse
from tests.conftest import ort_outputs
from tests.differential.cases import ALL, BATCH, FAMILIES, STATIC, Case
from tvm_fuse import CompileError, UnsupportedOpsError, host_features

EXAMPLES = int(os.environ.get("TVM_FUSE_DIFFERENTIAL_EXAMPLES", "6"))
RTOL = {"fp32": 1e-4, "bf16": 3e-2}  # of each output's largest magnitude
# The families whose convs and products a bf16 build computes in bf16, and the precisions to draw.
BF16_FAMILIES = {"conv", "conv_transpose", "matmul", "gemm", "cnn_graph"}
PRECISIONS = ["fp32", "bf16"] if "avx512_bf16" in host_features() else ["fp32"]


def assert_matches(outputs: list[np.ndarray], expected: list[np.ndarray], rtol: float) -> None:
    """Each output has the reference's shape and dtype, and its values within `rtol` of the
    output's largest finite magnitude (NaN where the reference has NaN)."""
    assert len(outputs) == len(expected)
    for index, (ours, reference) in enumerate(zip(outputs, expected)):
        assert ours.shape == reference.shape, f"output {index}: {ours.shape} != {reference.shape}"
        assert ours.dtype == reference.dtype, f"output {index}: {ours.dtype} != {reference.dtype}"
        finite = np.isfinite(reference)
        scale = float(np.max(np.abs(reference[finite]))) if finite.any() else 1.0
        np.testing.assert_allclose(ours, reference, rtol=rtol, atol=rtol * scale, equal_nan=True,
                                   err_msg=f"output {index}")


def check_case(case: Case, symbolic: str, fusion: bool, precision: str = "fp32") -> None:
    """`case` built by tvm_fuse matches ONNX Runtime, or else ONNX's reference evaluator (ONNX
    Runtime approximates some functions: its sigmoid of -9.94 is 4e-4 off, ours and the
    evaluator's exact), or is refused."""
    try:
        model = case.model(symbolic)
    except onnx.checker.ValidationError:  # an output ONNX's shape inference cannot type
        reject()
    try:
        expected = ort_outputs(model, case.inputs)
    except Exception:  # a combination ONNX Runtime does not implement: no reference
        reject()
    try:
        compiled = tvm_fuse.build(model, "native", disable_fusion=None if fusion else "all", precision=precision)
    except UnsupportedOpsError:
        return
    except CompileError as refused:
        if any(str(refused).startswith(f"cannot import ONNX node {node.name!r}") for node in case.nodes):
            return
        raise
    outputs = compiled.run(None, case.inputs)
    try:
        assert_matches(outputs, expected, RTOL[precision])
    except AssertionError:
        exact = ReferenceEvaluator(model).run(None, case.inputs)
        assert_matches(outputs, exact, RTOL[precision])


# The net checks answers: a kernel our schedules leave unscheduled (a bf16 1x1 conv of one input
# channel on a 1x1 image) is correct, only slow, and stays a warning here.
@pytest.mark.filterwarnings("default:schedule tvm_fuse:UserWarning")
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_op_family_matches_onnxruntime(family):
    @settings(max_examples=EXAMPLES, deadline=None, derandomize="TVM_FUSE_DIFFERENTIAL_EXAMPLES" not in os.environ,
              database=None, suppress_health_check=[HealthCheck.filter_too_much, HealthCheck.too_slow])
    @given(case=FAMILIES[family], symbolic=st.sampled_from([STATIC, BATCH, ALL]), fusion=st.booleans(),
           precision=st.sampled_from(PRECISIONS if family in BF16_FAMILIES else ["fp32"]))
    def check(case, symbolic, fusion, precision):
        check_case(case, symbolic, fusion, precision)

    check()
