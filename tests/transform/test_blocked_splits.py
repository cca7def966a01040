"""BlockedSplits: YOLOv8's C2f block (a conv split in halves, the halves and the convs after them
concatenated) runs its split and concat in the blocked layout, with no layout change inside
the block, where the cuts fall on whole blocks; a cut inside a block keeps NCHW; both match
ONNX Runtime."""

from __future__ import annotations

import numpy as np
import pytest
import tvm
from tvm import relax

import tvm_fuse
from tests.conftest import AVX512_TARGET, assert_close, ort_outputs
from tests.quantization.models import split_bottleneck
from tvm_fuse.frontend import relax_module
from tvm_fuse.pipeline import optimize
from tvm_fuse.target import parse_target


def _ops(model) -> list[str]:
    """The ops `main` calls after the graph passes, for AVX-512 (blocks of 16 channels)."""
    mod = optimize(relax_module(model).mod, parse_target(AVX512_TARGET), ())
    return [b.value.op.name for block in mod["main"].body.blocks for b in block.bindings
            if isinstance(b.value, relax.Call) and isinstance(b.value.op, tvm.ir.Op)]


@pytest.mark.parametrize("channels, inside", [(16, 0), (8, 5)])
def test_a_split_and_concat_of_whole_blocks_stay_blocked(channels, inside):
    # 16 channels a half: the input's and the output's layout changes alone. 8 (half a block):
    # five more, as without the pass.
    model = split_bottleneck(channels, sizes=True)
    ops = _ops(model)
    assert ops.count("relax.layout_transform") == 2 + inside, ops
    x = {"x": np.random.default_rng(1).standard_normal((1, channels, 16, 16)).astype(np.float32)}
    assert_close(tvm_fuse.build(model).run(None, x), ort_outputs(model, x))
