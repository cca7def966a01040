"""Products of two run-time tensors (attention) run our scheduled matmul kernel."""

from __future__ import annotations

import numpy as np
import pytest
import tvm
from tvm import relax

from tvm_fuse.ir_names import KERNEL_ATTR
from tvm_fuse.pipeline import compile_lowered, lowered, optimize
from tvm_fuse.target import parse_target
from tvm_fuse.transform.lower_matmuls import LowerMatmuls


def _attention_scores(x_shape, y_shape):
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType(x_shape, "float32"))
    y = relax.Var("y", relax.TensorType(y_shape, "float32"))
    with bb.function("main", [x, y]):
        with bb.dataflow():
            out = bb.emit_output(bb.emit(relax.op.matmul(x, y)))
        bb.emit_func_output(out)
    return bb.get()


@pytest.mark.parametrize("x_shape, y_shape", [((2, 4, 16, 8), (2, 4, 8, 16)), ((3, 5, 7), (7, 9)), ((1, 6, 4), (2, 4, 6))])
def test_run_time_products_become_our_kernel_and_match_tvm(x_shape, y_shape):
    mod = _attention_scores(x_shape, y_shape)
    lowered_mod = LowerMatmuls()(mod)
    kernels = [f for _, f in lowered_mod.functions_items() if isinstance(f, tvm.tirx.PrimFunc)]
    assert [str(f.attrs[KERNEL_ATTR]) for f in kernels] == ["matmul"]
    rng = np.random.default_rng(0)
    inputs = [tvm.runtime.tensor(rng.standard_normal(s).astype("float32")) for s in (x_shape, y_shape)]
    target = parse_target("llvm")
    reference = relax.VirtualMachine(tvm.compile(mod, target=target), tvm.cpu())["main"](*inputs).numpy()
    ours = compile_lowered(lowered(optimize(mod, target), target), target)
    result = relax.VirtualMachine(ours, tvm.cpu())["main"](*inputs).numpy()
    np.testing.assert_allclose(result, reference, rtol=1e-4, atol=1e-4 * np.abs(reference).max())
