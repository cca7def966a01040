"""FuseAttention: a BERT-style self-attention block (Q, K, V projections, heads split by
Reshape + Transpose, scaled and masked scores, Softmax (its NaNs zeroed, as torch exports
scaled_dot_product_attention), the product with V, heads merged)
runs as one attention kernel whose report entry names every node it computes, and equals
ONNX Runtime, with static and symbolic sequence lengths; the dense kernels it alone reads write
Q, K and V by head; a block of another form is left to the separate kernels, and equals ONNX
Runtime too. In a bf16 build its products run on `vdpbf16ps`."""

from __future__ import annotations

import re

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import tvm_fuse
from tests.conftest import assert_close, ort_outputs
from tvm_fuse.ir_names import PATTERN_ATTR

HEADS, DEPTH = 4, 16
WIDTH = HEADS * DEPTH


def _attention_model(batch, tokens, keys_split="transposed_once", scale_op="Div", masked=True,
                     scaled_operands=False, softmax_axis=-1, heads=HEADS, depth=DEPTH, biased=True,
                     nan_guard: float | None = None):
    """`keys_split`: K as columns by one Transpose [0, 2, 3, 1], or ("twice") by the heads'
    Transpose then a swap of the last two axes, as some exporters write it. `scaled_operands`:
    Q and K^T each scaled by D^-1/4 before the product, as torch exports
    scaled_dot_product_attention. `softmax_axis`: another axis than the keys' is not attention.
    `biased`: False, the projections' biases are zeros (an untrained model's), which the build drops.
    `nan_guard`: the softmax's NaNs replaced by this value, as torch exports
    scaled_dot_product_attention (with 0)."""
    width = heads * depth
    rng = np.random.default_rng(0)
    weights = [numpy_helper.from_array((rng.standard_normal((width, width)) * 0.3).astype(np.float32), f"w_{n}")
               for n in "qkv"]
    biases = [numpy_helper.from_array(rng.standard_normal(width).astype(np.float32) * biased, f"b_{n}") for n in "qkv"]
    constants = [numpy_helper.from_array(np.array([0, 0, heads, depth], np.int64), "heads_shape"),
                 numpy_helper.from_array(np.array([0, 0, width], np.int64), "merged_shape"),
                 numpy_helper.from_array(np.array(np.sqrt(depth), np.float32), "root_depth"),
                 numpy_helper.from_array(np.array(1 / np.sqrt(depth), np.float32), "inverse_root_depth"),
                 numpy_helper.from_array(np.array(depth ** -0.25, np.float32), "root_root_depth"),
                 numpy_helper.from_array(np.array(nan_guard or 0, np.float32), "nan_value")]
    nodes = []
    for n in "qkv":
        nodes += [helper.make_node("MatMul", ["x", f"w_{n}"], [f"{n}_product"], name=f"{n}_matmul"),
                  helper.make_node("Add", [f"{n}_product", f"b_{n}"], [n], name=f"{n}_bias"),
                  helper.make_node("Reshape", [n, "heads_shape"], [f"{n}_heads"], name=f"{n}_reshape")]
    nodes += [helper.make_node("Transpose", ["q_heads"], ["q4"], name="q_transpose", perm=[0, 2, 1, 3]),
              helper.make_node("Transpose", ["v_heads"], ["v4"], name="v_transpose", perm=[0, 2, 1, 3])]
    if keys_split == "twice":
        nodes += [helper.make_node("Transpose", ["k_heads"], ["k4"], name="k_transpose", perm=[0, 2, 1, 3]),
                  helper.make_node("Transpose", ["k4"], ["kt"], name="k_swap", perm=[0, 1, 3, 2])]
    else:
        nodes.append(helper.make_node("Transpose", ["k_heads"], ["kt"], name="k_transpose", perm=[0, 2, 3, 1]))
    query, keys = "q4", "kt"
    if scaled_operands:
        nodes += [helper.make_node("Mul", ["q4", "root_root_depth"], ["q_scaled"], name="q_scale"),
                  helper.make_node("Mul", ["kt", "root_root_depth"], ["k_scaled"], name="k_scale")]
        query, keys = "q_scaled", "k_scaled"
    nodes.append(helper.make_node("MatMul", [query, keys], ["scores"], name="scores"))
    logits = "scores"
    if not scaled_operands:
        nodes.append(helper.make_node(scale_op, ["scores", "root_depth" if scale_op == "Div" else "inverse_root_depth"],
                                      ["scaled"], name="scale"))
        logits = "scaled"
    if masked:
        nodes.append(helper.make_node("Add", [logits, "mask"], ["masked"], name="mask_add"))
        logits = "masked"
    nodes.append(helper.make_node("Softmax", [logits], ["probabilities"], name="softmax", axis=softmax_axis))
    probabilities = "probabilities"
    if nan_guard is not None:
        nodes += [helper.make_node("IsNaN", ["probabilities"], ["undefined"], name="isnan"),
                  helper.make_node("Where", ["undefined", "nan_value", "probabilities"], ["guarded"], name="guard")]
        probabilities = "guarded"
    nodes += [helper.make_node("MatMul", [probabilities, "v4"], ["context4"], name="context"),
              helper.make_node("Transpose", ["context4"], ["context_heads"], name="merge_transpose", perm=[0, 2, 1, 3]),
              helper.make_node("Reshape", ["context_heads", "merged_shape"], ["y"], name="merge_reshape")]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, tokens, width])]
    if masked:
        inputs.append(helper.make_tensor_value_info("mask", TensorProto.FLOAT, [batch, 1, 1, tokens]))
    graph = helper.make_graph(nodes, "attention", inputs,
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, tokens, width])],
                              weights + biases + constants)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    return model


def _feed(batch, tokens, masked=True, seed=1, width=WIDTH):
    rng = np.random.default_rng(seed)
    feed = {"x": rng.standard_normal((batch, tokens, width)).astype(np.float32)}
    if masked:
        mask = np.zeros((batch, 1, 1, tokens), np.float32)
        mask[-1, ..., tokens // 2 + 1:] = np.finfo(np.float32).min  # the last sentence padded
        feed["mask"] = mask
    return feed


def _attention_kernels(compiled) -> list[dict]:
    return [k for k in compiled.fusion_report()["kernels"] if k["pattern"] == "attention"]


@pytest.mark.parametrize("keys_split, scale_op, target", [("transposed_once", "Div", "native"),
                                                            ("twice", "Mul", "native"),
                                                            ("transposed_once", "Div", "llvm -mcpu=haswell")])
def test_a_bert_attention_block_runs_as_one_kernel(keys_split, scale_op, target):
    """On the host's vector ISA, and on AVX2's 8 lanes (which every x86 host runs)."""
    model = _attention_model(2, 24, keys_split, scale_op)
    compiled = tvm_fuse.build(model, target)
    (kernel,) = _attention_kernels(compiled)
    absorbed = {"q_reshape", "k_reshape", "v_reshape", "q_transpose", "k_transpose", "v_transpose", "scores", "scale",
                "mask_add", "softmax", "context", "merge_transpose", "merge_reshape"}
    assert absorbed | ({"k_swap"} if keys_split == "twice" else set()) <= set(kernel["onnx_nodes"])
    assert not {u["onnx_node"] for u in compiled.fusion_report()["unfused"]} & absorbed
    feed = _feed(2, 24)
    assert_close(compiled.run(None, feed), ort_outputs(model, feed), rtol=1e-4)


def test_one_build_serves_every_sequence_length():
    model = _attention_model("batch", "tokens")
    compiled = tvm_fuse.build(model, "native")
    assert len(_attention_kernels(compiled)) == 1
    for batch, tokens in ((1, 1), (2, 7), (1, 40)):
        feed = _feed(batch, tokens, seed=tokens)
        assert_close(compiled.run(None, feed), ort_outputs(model, feed), rtol=1e-4)


def _attention_function(model, target: str, precision: str = "fp32"):
    """The scheduled attention kernel of `model` optimized for `target` in `precision`."""
    import tvm

    from tvm_fuse.frontend import relax_module
    from tvm_fuse.pipeline import optimize
    from tvm_fuse.target import parse_target
    from tvm_fuse.transform.realize.bf16 import bf16_pass

    parsed = parse_target(target)
    optimized = optimize(relax_module(model).mod, parsed, bf16=bf16_pass(precision, parsed))
    (attention,) = [f for f in optimized.functions.values()
                    if isinstance(f, tvm.tirx.PrimFunc) and (f.attrs or {}).get(PATTERN_ATTR) == "attention"]
    return attention


def test_a_bf16_build_multiplies_attention_in_bf16():
    """Compiled for Zen 4 (AVX512-BF16), on any host: the attention kernel's code has
    `vdpbf16ps`, and the report says bf16."""
    import tvm

    from tvm_fuse.pipeline import TIR_PIPELINE
    from tvm_fuse.target import parse_target

    model = _attention_model(2, 24)
    (kernel,) = _attention_kernels(tvm_fuse.build(model, "llvm -mcpu=znver4", precision="bf16"))
    assert kernel["precision"] == "bf16"
    attention = _attention_function(model, "llvm -mcpu=znver4", "bf16")
    kernel = tvm.compile(tvm.IRModule({"main": attention.with_attr("global_symbol", "main")}),
                         target=parse_target("llvm -mcpu=znver4"), tir_pipeline=TIR_PIPELINE)
    assert re.search(r"\bvdpbf16ps\b", kernel.mod.inspect_source("asm"))


@pytest.mark.bf16
def test_bf16_attention_stays_close_to_onnxruntime():
    """Q, K, V, the exponentials and the dense layers' operands rounded to bf16 (8 bits of
    mantissa): within 5% of the largest output; measured 2.9% on this random model, whose
    large scores make a sharp softmax (1.4% with the attention's products in fp32)."""
    model = _attention_model("batch", "tokens")
    compiled = tvm_fuse.build(model, "native", precision="bf16")
    for batch, tokens in ((1, 1), (2, 24)):
        feed = _feed(batch, tokens, seed=tokens)
        (ours,), (theirs,) = compiled.run(None, feed), ort_outputs(model, feed)
        assert np.abs(ours - theirs).max() <= 0.05 * np.abs(theirs).max()


def test_the_attention_family_switches_it_off():
    model = _attention_model(1, 20)
    compiled = tvm_fuse.build(model, "native", disable_fusion=["attention"])
    assert not _attention_kernels(compiled)
    feed = _feed(1, 20)
    assert_close(compiled.run(None, feed), ort_outputs(model, feed), rtol=1e-4)


@pytest.mark.parametrize("form", ["unmasked", "operands_scaled", "softmax_over_queries"])
def test_other_forms(form):
    """Without a mask, or with Q and K scaled before the product, the block still fuses; a
    softmax over another axis than the keys' is left to the separate kernels."""
    masked = form != "unmasked"
    model = _attention_model(1, 20, masked=masked, scaled_operands=form == "operands_scaled",
                             softmax_axis=2 if form == "softmax_over_queries" else -1)
    compiled = tvm_fuse.build(model, "native")
    kernels = _attention_kernels(compiled)
    assert len(kernels) == (0 if form == "softmax_over_queries" else 1)
    if form == "operands_scaled":
        assert {"q_scale", "k_scale", "scores", "softmax"} <= set(kernels[0]["onnx_nodes"])
    feed = _feed(1, 20, masked)
    assert_close(compiled.run(None, feed), ort_outputs(model, feed), rtol=1e-4)


@pytest.mark.parametrize("nan_value, fused", [(0.0, True), (1.0, False)])
def test_torch_sdpa_zeroes_the_rows_whose_keys_are_all_masked(nan_value, fused):
    """transformers 5 exports scaled_dot_product_attention with Q and K^T scaled, a mask of 0
    and -inf added, and the softmax's NaNs (a row whose keys are all masked) set to 0: one
    kernel, whose rows are 0 there. NaNs set to another value are left to separate kernels."""
    model = _attention_model(2, 20, scaled_operands=True, nan_guard=nan_value)
    compiled = tvm_fuse.build(model, "native")
    kernels = _attention_kernels(compiled)
    assert len(kernels) == fused
    if fused:
        assert {"softmax", "isnan", "guard", "context"} <= set(kernels[0]["onnx_nodes"])
    feed = _feed(2, 20)
    feed["mask"][0, ..., 5:] = -np.inf  # the first sentence padded
    feed["mask"][1] = -np.inf  # every key of the second masked
    reference = ort_outputs(model, feed)
    assert np.all(reference[0][1] == (0 if nan_value == 0 else reference[0][1]))
    assert_close(compiled.run(None, feed), reference, rtol=1e-4)


def _operand_ranks(model) -> list[int]:
    """The ranks of the attention kernel's Q, K and V: 4 where their kernels write them by head."""
    return [len(p.shape) for p in _attention_function(model, "native").params[:3]]


@pytest.mark.parametrize("keys_from", ["x", "memory"])
def test_the_projections_write_q_k_and_v_by_head(keys_from):
    """Q, K and V from one packed dense kernel, or (K and V from another input, as a
    cross-attention reads them) Q from its own and K and V from a packed one: the kernels
    write `[B, H, S, D]`, and the model equals ONNX Runtime at every length."""
    model = _attention_model("batch", "tokens")
    feeds = [_feed(batch, tokens, seed=tokens) for batch, tokens in ((1, 1), (2, 24))]
    if keys_from == "memory":
        _keys_from_memory(model, feeds)
    assert _operand_ranks(model) == [4, 4, 4]
    compiled = tvm_fuse.build(model, "native")
    for feed in feeds:
        assert_close(compiled.run(None, feed), ort_outputs(model, feed), rtol=1e-4)


def _keys_from_memory(model, feeds) -> None:
    """K and V projected from another input, "memory", as a cross-attention reads them."""
    width = feeds[0]["x"].shape[-1]
    for node in model.graph.node:
        if node.name in ("k_matmul", "v_matmul"):
            node.input[0] = "memory"
    model.graph.input.append(helper.make_tensor_value_info("memory", TensorProto.FLOAT, ["batch", "tokens", width]))
    for feed in feeds:
        feed["memory"] = np.random.default_rng(7).standard_normal(feed["x"].shape).astype(np.float32)


@pytest.mark.parametrize("depth", [12, 36])
def test_projections_without_a_bias_write_by_head_at_any_depth(depth):
    """Projections without a bias (the product is its kernel's last stage) into heads of 12 or
    36 channels (MobileViT's), not whole vectors: written by head, and equal to ONNX Runtime.
    Each register tile used to be written back over every head its columns touch, columns it
    had not computed too: garbage or NaN."""
    model = _attention_model(2, 16, masked=False, heads=4, depth=depth, biased=False)
    assert _operand_ranks(model) == [4, 4, 4]
    compiled = tvm_fuse.build(model, "native")
    feed = _feed(2, 16, masked=False, width=4 * depth)
    assert_close(compiled.run(None, feed), ort_outputs(model, feed), rtol=1e-4)


def test_projections_padded_past_whole_heads_keep_their_layout():
    """Five heads of 12 (SegFormer's): Q's 60 columns and K's and V's packed 120 are computed
    padded to whole vectors (64, 128), which are not whole heads, so their kernels write
    `[B, S, N]` and the attention kernel reads them there (the layout change failed the build)."""
    model = _attention_model("batch", "tokens", heads=5, depth=12)
    feeds = [_feed(2, 16, width=60)]
    _keys_from_memory(model, feeds)
    assert _operand_ranks(model) == [3, 3, 3]
    compiled = tvm_fuse.build(model, "native")
    assert_close(compiled.run(None, feeds[0]), ort_outputs(model, feeds[0]), rtol=1e-4)


def test_a_projection_read_elsewhere_keeps_its_layout():
    """Q is also a graph output: its kernel writes `[B, S, H * D]` for that reader, and so the
    attention kernel reads all three as their kernels write them unsplit."""
    model = _attention_model(2, 24)
    model.graph.output.append(helper.make_tensor_value_info("q", TensorProto.FLOAT, [2, 24, WIDTH]))
    assert _operand_ranks(model) == [3, 3, 3]
    compiled = tvm_fuse.build(model, "native")
    feed = _feed(2, 24)
    assert_close(compiled.run(None, feed), ort_outputs(model, feed), rtol=1e-4)
