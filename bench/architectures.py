"""Architectures users bring from transformers, at realistic sizes, against ONNX Runtime and
OpenVINO in one run: each model built from its config (random weights: speed does not depend
on them; nothing is downloaded), exported as a user would (torch's TorchScript exporter,
opset 17), then tvm_fuse, ONNX Runtime and OpenVINO f32 take turns on the same input
(`tvm_fuse.benchmarking.compare.time_alternating`). Needs the test extra (torch, and transformers through
sentence-transformers) and the bench extra.

    python bench/architectures.py                       # every model below
    python bench/architectures.py --models vit_b16_l4 wav2vec2_base_l4

Prints per model: medians in ms, ORT/ours and OV/ours (above 1: tvm_fuse is faster), our
largest output difference from ONNX Runtime relative to its largest magnitude, build seconds.
Text models run at sequence 128 with every token real; `_l4`: 4 layers of the base model, as
every layer is alike.
"""

from __future__ import annotations

import argparse
import io
import os
import time
import warnings

import onnx

import tvm_fuse
from tvm_fuse.benchmarking.compare import OpenVINOSession, differences, onnxruntime_session, time_alternating
from tvm_fuse.target import host_cores


def _architectures() -> dict:
    """name -> () -> (torch model, input kind)."""
    import transformers as t

    layers = 4
    return {
        "bert_base_l4": lambda: (t.BertModel(t.BertConfig(num_hidden_layers=layers)), "text"),
        "distilbert_l4": lambda: (t.DistilBertModel(t.DistilBertConfig(n_layers=layers)), "text"),
        "deberta_v3_base_l4": lambda: (t.DebertaV2Model(t.DebertaV2Config(
            num_hidden_layers=layers, relative_attention=True, position_buckets=256, pos_att_type=["p2c", "c2p"],
            max_relative_positions=-1, position_biased_input=False, norm_rel_ebd="layer_norm",
            share_att_key=True)), "text"),
        "modernbert_base_l4": lambda: (t.ModernBertModel(t.ModernBertConfig(num_hidden_layers=layers)), "text"),
        "t5_small_encoder": lambda: (t.T5EncoderModel(t.T5Config(d_model=512, d_ff=2048, num_layers=layers,
                                                                 num_heads=8, d_kv=64)), "text"),
        "qwen2_512_l4": lambda: (t.Qwen2Model(t.Qwen2Config(hidden_size=512, intermediate_size=1536,
                                                            num_hidden_layers=layers, num_attention_heads=8,
                                                            num_key_value_heads=2, vocab_size=1000)), "text"),
        "vit_b16_l4": lambda: (t.ViTModel(t.ViTConfig(num_hidden_layers=layers)), "image224"),
        "clip_vit_b16_l4": lambda: (t.CLIPVisionModel(t.CLIPVisionConfig(num_hidden_layers=layers, patch_size=16)),
                                    "image224"),
        "convnext_tiny": lambda: (t.ConvNextModel(t.ConvNextConfig()), "image224"),
        "swin_tiny": lambda: (t.SwinModel(t.SwinConfig()), "image224"),
        "mobilevit_small": lambda: (t.MobileViTModel(t.MobileViTConfig()), "image256"),
        "segformer_b0": lambda: (t.SegformerModel(t.SegformerConfig()), "image224"),
        "whisper_tiny_encoder_l4": lambda: (t.WhisperModel(t.WhisperConfig(
            d_model=384, encoder_layers=layers, encoder_attention_heads=6, encoder_ffn_dim=1536,
            decoder_layers=1)).get_encoder(), "mel"),
        "wav2vec2_base_l4": lambda: (t.Wav2Vec2Model(t.Wav2Vec2Config(num_hidden_layers=layers)), "audio"),
        "regnet_default": lambda: (t.RegNetModel(t.RegNetConfig()), "image224"),
        "efficientnet_b7_224": lambda: (t.EfficientNetModel(t.EfficientNetConfig()), "image224"),
    }


def exported(name: str) -> tuple[onnx.ModelProto, dict]:
    """The model `name` as ONNX (its last hidden state as the output) and a feed for it."""
    import torch

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    torch.manual_seed(0)
    model, kind = _architectures()[name]()
    if kind == "text":
        names = ["input_ids", "attention_mask"]
        args = (torch.randint(5, 1000, (1, 128)), torch.ones(1, 128, dtype=torch.long))
    elif kind.startswith("image"):
        size = int(kind.removeprefix("image"))
        names, args = ["pixel_values"], (torch.randn(1, 3, size, size),)
    elif kind == "audio":  # 1 s at 16 kHz
        names, args = ["input_values"], (torch.randn(1, 16000),)
    else:  # 30 s of 80 mel bins
        names, args = ["input_features"], (torch.randn(1, 80, 3000),)

    class LastHiddenState(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model.eval()

        def forward(self, *inputs):
            output = self.model(**dict(zip(names, inputs)))
            return output[0] if isinstance(output, tuple) else output.last_hidden_state

    buffer = io.BytesIO()
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # tracer warnings about transformers' shape arithmetic
        torch.onnx.export(LastHiddenState(), args, buffer, input_names=names, opset_version=17, dynamo=False)
    return onnx.load_from_string(buffer.getvalue()), {n: a.numpy() for n, a in zip(names, args)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="models: " + " ".join(_architectures()))
    parser.add_argument("--models", nargs="+", default=None, help="names from the list below (default: all)")
    parser.add_argument("--repeat", type=int, default=10, help="timed runs per runtime (default 10)")
    parser.add_argument("--threads", type=int, default=host_cores(), help="for every runtime (default: all cores)")
    parser.add_argument("--no-openvino", action="store_true", help="leave OpenVINO out")
    args = parser.parse_args()
    names = args.models or list(_architectures())
    unknown = sorted(set(names) - set(_architectures()))
    if unknown:
        parser.error(f"unknown model(s) {unknown}; choose from {list(_architectures())}")
    print(f"{'model':24s} {'ours ms':>9s} {'ORT ms':>9s} {'OV ms':>9s} {'ORT/ours':>9s} {'OV/ours':>8s} "
          f"{'rel err':>8s} {'build s':>8s}")
    for name in names:
        model, feed = exported(name)
        start = time.perf_counter()
        ours = tvm_fuse.build(model)
        build_s = time.perf_counter() - start
        runtimes = {"ours": ours, "ort": onnxruntime_session(model, args.threads)}
        if not args.no_openvino:
            runtimes["ov"] = OpenVINOSession(model, args.threads)
        error = differences(ours.run(None, feed), runtimes["ort"].run(None, feed))[1]
        timed = time_alternating(runtimes, feed, args.threads, repeat=args.repeat)
        latency = {k: v.median_ms for k, v in timed.items()}
        ov = latency.get("ov", float("nan"))
        print(f"{name:24s} {latency['ours']:9.2f} {latency['ort']:9.2f} {ov:9.2f} "
              f"{latency['ort'] / latency['ours']:8.2f}x {ov / latency['ours']:7.2f}x {error:8.1e} {build_s:8.1f}",
              flush=True)


if __name__ == "__main__":
    main()
