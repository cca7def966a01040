"""The fused attention kernel equals numpy's `softmax(Q K^T * scale + mask) V` per head, with
Q, K, V and the result in `[batch, tokens, heads * depth]` (Q, K and V also `[batch, heads,
tokens, depth]`): static token counts whole and ragged (keys padded to vectors, query rows to
row blocks), symbolic ones at several lengths, masks broadcast as ONNX broadcasts them, and
every knob setting a tuner may pick. Its bf16 form equals the same products of bf16-rounded
Q, scaled K, V and exponentials. Compiled for this host's vector width, so it runs on AVX2
hosts too."""

from __future__ import annotations

import numpy as np
import pytest
import tvm
from tvm import te

from tvm_fuse.compute.attention import KEY_MULTIPLE, attention, pad_keys
from tvm_fuse.compute.bf16 import bits_of, value_of
from tvm_fuse.ir_names import KNOBS_ATTR
from tvm_fuse.pipeline import TIR_PIPELINE
from tvm_fuse.schedules import apply, knob_space
from tvm_fuse.target import parse_target, vector_lanes

TARGET = parse_target("native")
LANES = vector_lanes(TARGET)
MASKED = np.float32(-3.4e38)  # what BERT-style exporters add for a padded token


def _kernel(batch, queries, keys, heads, depth, mask_shape, scale, knobs=None, bf16=None, heads_first=False):
    """The compiled kernel and its placeholders' shapes (symbolic dims given as names).
    `heads_first`: Q, K and V `[batch, heads, tokens, depth]`."""
    dims = {}

    def dim(d):
        return dims.setdefault(d, te.var(d)) if isinstance(d, str) else d

    def operand(tokens, name):
        shape = (heads, dim(tokens), depth) if heads_first else (dim(tokens), heads * depth)
        return te.placeholder((dim(batch), *shape), "float32", name=name)

    q, k, v = operand(queries, "q"), operand(keys, "k"), operand(keys, "v")
    mask = te.placeholder(tuple(dim(d) for d in mask_shape), "float32", name="mask") if mask_shape else None
    out = attention(q, k, v, mask, heads, scale, LANES, bf16=bf16, heads_first=heads_first)
    func = te.create_prim_func([q, k, v, *([mask] if mask is not None else []), out])
    scheduled = apply(func, LANES, knobs)
    assert scheduled.attrs[KNOBS_ATTR] == ("tuned" if knobs else "default")  # scheduled, not left as it was
    return tvm.compile(tvm.IRModule({"main": scheduled}), target=TARGET, tir_pipeline=TIR_PIPELINE), func


def _reference(q, k, v, mask, heads, scale, bf16=False):
    """numpy's attention; `bf16`: of Q, K * scale, V and the exponentials rounded to bf16,
    summed in float64 (the exponentials' sum unrounded)."""
    batch, queries, width = q.shape
    depth = width // heads
    rounded = (lambda x: value_of(bits_of(x)).astype(np.float64)) if bf16 else (lambda x: x)

    def split(x):
        return x.reshape(batch, -1, heads, depth).transpose(0, 2, 1, 3)

    scores = (rounded(split(q)) @ rounded(split(k) * np.float32(scale)).transpose(0, 1, 3, 2)).astype(np.float32)
    if mask is not None:
        scores = scores + mask
    exps = np.exp(scores - scores.max(axis=-1, keepdims=True))
    context = rounded(exps) @ rounded(split(v)) / exps.sum(axis=-1, keepdims=True)
    return context.transpose(0, 2, 1, 3).reshape(batch, queries, width)


def _check(kernel, batch, queries, keys, heads, depth, mask_shape, scale, seed=0, bf16=None, heads_first=False):
    rng = np.random.default_rng(seed)
    q, k, v = (rng.standard_normal((batch, n, heads * depth)).astype(np.float32) for n in (queries, keys, keys))
    mask = None
    if mask_shape:
        shape = [{"b": batch, "n": queries}.get(d, d) if isinstance(d, str) else d for d in mask_shape]
        shape[-1] = keys  # the last axis runs over the keys
        mask = np.where(rng.random(shape) < 0.3, MASKED, np.float32(0)).astype(np.float32)
        mask[..., 0] = 0  # every row keeps a key
    operands = [x.reshape(batch, -1, heads, depth).transpose(0, 2, 1, 3).copy() for x in (q, k, v)] if heads_first \
        else [q, k, v]
    out = tvm.runtime.tensor(np.zeros((batch, queries, heads * depth), np.float32))
    kernel["main"](*(tvm.runtime.tensor(a) for a in (*operands, *([mask] if mask is not None else []))), out)
    # bf16: an exponential rounded the other way (ours from `fast_exp`) moves a result by 2^-8
    # of its share; measured largest difference 4e-4 at 128 keys.
    tolerance = {"rtol": 1e-3, "atol": 1e-3} if bf16 else {"rtol": 1e-5, "atol": 2e-6}
    np.testing.assert_allclose(out.numpy(), _reference(q, k, v, mask, heads, scale, bool(bf16)), **tolerance)


@pytest.mark.parametrize("batch, queries, keys, heads, depth, mask_shape", [
    (1, 128, 128, 12, 32, (1, 1, 128, 128)),  # MiniLM: a mask per batch, row and key
    (2, 7, 7, 2, 64, (2, 1, 1, 7)),  # ragged tokens, a mask per key broadcast over heads and rows
    (2, 12, 40, 4, 16, None),  # queries and keys of other counts, no mask
    (1, 1, 3, 1, 32, (3,)),  # one query; a mask of rank 1
])
def test_static_token_counts(batch, queries, keys, heads, depth, mask_shape):
    kernel, _ = _kernel(batch, queries, keys, heads, depth, mask_shape, scale=0.125)
    _check(kernel, batch, queries, keys, heads, depth, mask_shape, scale=0.125)


def test_one_kernel_serves_every_sequence_length():
    kernel, _ = _kernel("b", "n", "n", 3, 32, ("b", 1, 1, "n"), scale=0.17677669)
    for batch, length in ((1, 1), (2, 7), (1, 16), (2, 131)):
        _check(kernel, batch, length, length, 3, 32, ("b", 1, 1, "n"), scale=0.17677669, seed=length)


def test_every_knob_setting_computes_the_same():
    _, func = _kernel("b", "n", "n", 2, 32, ("b", 1, "n", "n"), scale=0.25)
    settings = knob_space(func, LANES)
    assert len(settings) > 2
    for knobs in settings:
        kernel, _ = _kernel("b", "n", "n", 2, 32, ("b", 1, "n", "n"), scale=0.25, knobs=knobs)
        for length in (5, 33):
            _check(kernel, 2, length, length, 2, 32, ("b", 1, "n", "n"), scale=0.25, seed=length)


def test_a_mask_padded_once_serves_the_kernel():
    """A symbolic length's mask, padded by `pad_keys` (zeros past the real keys), read by the
    kernel in whole vectors: the same result as the mask read at clamped indices."""
    n = te.var("n")
    mask = te.placeholder((1, 1, n, n), "float32", name="mask")
    padding = tvm.compile(tvm.IRModule({"main": te.create_prim_func([mask, pad_keys(mask)])}), target=TARGET)
    q, k, v = (te.placeholder((1, n, 64), "float32", name=name) for name in "qkv")
    padded_mask = te.placeholder((1, 1, n, (n + KEY_MULTIPLE - 1) // KEY_MULTIPLE * KEY_MULTIPLE), "float32",
                                 name="padded_mask")
    func = te.create_prim_func([q, k, v, padded_mask, attention(q, k, v, padded_mask, 2, 0.2, LANES, mask_padded=True)])
    kernel = tvm.compile(tvm.IRModule({"main": apply(func, LANES)}), target=TARGET, tir_pipeline=TIR_PIPELINE)
    rng = np.random.default_rng(3)
    for length in (3, 40):
        data = [rng.standard_normal((1, length, 64)).astype(np.float32) for _ in range(3)]
        masks = np.where(rng.random((1, 1, length, length)) < 0.3, MASKED, np.float32(0)).astype(np.float32)
        columns = -(-length // KEY_MULTIPLE) * KEY_MULTIPLE
        padded = tvm.runtime.tensor(np.full((1, 1, length, columns), 7.0, np.float32))
        padding["main"](tvm.runtime.tensor(masks), padded)
        expected = np.concatenate([masks, np.zeros((1, 1, length, columns - length), np.float32)], axis=-1)
        np.testing.assert_array_equal(padded.numpy(), expected)
        out = tvm.runtime.tensor(np.zeros((1, length, 64), np.float32))
        kernel["main"](*(tvm.runtime.tensor(a) for a in data), padded, out)
        np.testing.assert_allclose(out.numpy(), _reference(*data, masks, 2, 0.2), rtol=1e-5, atol=2e-6)


@pytest.mark.parametrize("bf16", [pytest.param("vdpbf16ps", marks=pytest.mark.bf16), "portable"])
@pytest.mark.parametrize("batch, queries, keys, heads, depth, mask_shape", [
    (1, 128, 128, 12, 32, (1, 1, 1, 128)),  # MiniLM
    (2, 7, 7, 2, 64, (2, 1, 7, 7)),  # ragged tokens: padded keys and rows
    (1, 40, 40, 2, 16, None),
])
def test_bf16_products_equal_those_of_the_rounded_operands(bf16, batch, queries, keys, heads, depth, mask_shape):
    kernel, _ = _kernel(batch, queries, keys, heads, depth, mask_shape, scale=0.17677669, bf16=bf16)
    _check(kernel, batch, queries, keys, heads, depth, mask_shape, scale=0.17677669, bf16=bf16)


def test_bf16_kernel_serves_every_sequence_length_and_knob_setting():
    _, func = _kernel("b", "n", "n", 2, 32, ("b", 1, 1, "n"), scale=0.25, bf16="portable")
    for knobs in knob_space(func, LANES):
        kernel, _ = _kernel("b", "n", "n", 2, 32, ("b", 1, 1, "n"), scale=0.25, knobs=knobs, bf16="portable")
        for batch, length in ((1, 1), (2, 33)):
            _check(kernel, batch, length, length, 2, 32, ("b", 1, 1, "n"), scale=0.25, seed=length, bf16="portable")


@pytest.mark.parametrize("bf16", [None, "portable"])
def test_operands_written_by_head_give_the_same_result(bf16):
    """Q, K and V `[batch, heads, tokens, depth]`, as the dense layers FuseAttention gives this
    kernel write them: at a static length and a symbolic one, every knob setting."""
    kernel, _ = _kernel(1, 128, 128, 12, 32, (1, 1, 1, 128), 0.17677669, bf16=bf16, heads_first=True)
    _check(kernel, 1, 128, 128, 12, 32, (1, 1, 1, 128), 0.17677669, bf16=bf16, heads_first=True)
    _, func = _kernel("b", "n", "n", 2, 32, ("b", 1, 1, "n"), 0.25, bf16=bf16, heads_first=True)
    for knobs in knob_space(func, LANES):
        kernel, _ = _kernel("b", "n", "n", 2, 32, ("b", 1, 1, "n"), 0.25, knobs, bf16, heads_first=True)
        for batch, length in ((1, 1), (2, 33)):
            _check(kernel, batch, length, length, 2, 32, ("b", 1, 1, "n"), 0.25, length, bf16, heads_first=True)
