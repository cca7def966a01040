"""The architectures of `tvm_fuse.benchmarking.models.zoo` (YOLOv8-style detector, MobileNetV3 with SE
blocks, U-Net, CRNN, a face-detection cascade's channels-last nets) build for the native target, match ONNX Runtime within 1e-3 of each
output's largest magnitude at batch 1 and 4, and their fusion report accounts for every node."""

import functools

import numpy as np
import onnx
import pytest

import tvm_fuse
from tests.conftest import assert_close, ort_outputs
from tvm_fuse.benchmarking.models import zoo

pytestmark = pytest.mark.slow

MODELS = {  # name -> (builder, input name, input shape without the batch)
    "yolov8_detector": (zoo.yolov8_detector, "images", (3, 64, 64)),
    "unet": (zoo.unet, "image", (3, 64, 64)),
    "mobilenet_v3": (zoo.mobilenet_v3, "input", (3, 64, 64)),
    "crnn": (zoo.crnn, "image", (1, 32, 100)),
    "face_pnet": (functools.partial(zoo.face_cascade, "pnet", height=60, width=80), "image", (60, 80, 3)),
    "face_rnet": (functools.partial(zoo.face_cascade, "rnet"), "image", (24, 24, 3)),
    "face_onet": (functools.partial(zoo.face_cascade, "onet"), "image", (48, 48, 3)),
}


@pytest.mark.parametrize("batch", [1, 4])
@pytest.mark.parametrize("name", sorted(MODELS))
def test_architecture_matches_onnxruntime(name, batch):
    builder, input_name, shape = MODELS[name]
    model = builder()
    onnx.checker.check_model(model, full_check=True)
    feed = {input_name: np.random.default_rng(batch).standard_normal((batch, *shape)).astype(np.float32)}
    compiled = tvm_fuse.build(model, "native", input_shapes={input_name: (batch, *shape)})
    assert_close(compiled.run(None, feed), ort_outputs(model, feed), rtol=1e-3)
    report = compiled.fusion_report()
    seen = ({n for k in report["kernels"] for n in k["onnx_nodes"]} | {u["onnx_node"] for u in report["unfused"]}
            | {f["onnx_node"] for f in report["folded"]})
    assert {n.name for n in model.graph.node} <= seen
    assert all(u["reason"] for u in report["unfused"])
