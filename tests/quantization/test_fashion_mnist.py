"""int8 accuracy on real data: the two CNNs trained on Fashion-MNIST that ship in the package
(`tvm_fuse.benchmarking.models.fashion_mnist_model`, trained by `python bench/fashion_mnist.py train`) keep
their fp32 top-1 on the 10k test images within 0.5 points in int8, with each calibration method.

As `bench/fashion_mnist.py`: the full 10k test set, calibrated on the first 500 training
images; the images come from Debian's `dataset-fashion-mnist`.
"""

from __future__ import annotations

import numpy as np
import pytest

import tvm_fuse
from tvm_fuse.benchmarking.compare import onnxruntime_session
from tvm_fuse.benchmarking.datasets import fashion_mnist
from tvm_fuse.benchmarking.models import FASHION_MNIST_MODELS, fashion_mnist_model

pytestmark = [
    pytest.mark.avx512, pytest.mark.vnni, pytest.mark.slow,
    pytest.mark.skipif(not fashion_mnist.available(), reason=f"Fashion-MNIST is not in {fashion_mnist.ROOT}: "
                       "apt-get install dataset-fashion-mnist"),
]

BATCH = 100  # images per run
SHAPES = {"image": (BATCH, 1, 28, 28)}
CALIBRATION_IMAGES = 500  # as bench/fashion_mnist.py
MAX_DROP = 0.5  # top-1 points int8 may lose against fp32


def top1(run, images: np.ndarray, labels: np.ndarray) -> float:
    """Top-1 in percent of `run(feed) -> [logits]` over `images` in batches of BATCH."""
    hits = sum(int((run({"image": images[i:i + BATCH]})[0].argmax(1) == labels[i:i + BATCH]).sum())
               for i in range(0, len(images), BATCH))
    return 100 * hits / len(images)


def dense_convs_of_4k_channels(model) -> set[str]:
    """The Conv nodes an int8 kernel takes in any case: ungrouped, input channels a multiple of 4."""
    weights = {w.name: w.dims for w in model.graph.initializer}
    return {n.name for n in model.graph.node if n.op_type == "Conv" and weights[n.input[1]][1] % 4 == 0
            and all(a.i == 1 for a in n.attribute if a.name == "group")}


@pytest.fixture(scope="module")
def test_set():
    return fashion_mnist.load("test")


@pytest.fixture(scope="module")
def calibration():
    return fashion_mnist.load("train")[0][:CALIBRATION_IMAGES]


@pytest.fixture(scope="module", params=FASHION_MNIST_MODELS)
def trained(request, test_set):
    """(name, ONNX model, tvm_fuse fp32 top-1)."""
    model = fashion_mnist_model(request.param)
    fp32 = tvm_fuse.build(model, input_shapes=SHAPES)  # for this CPU, as the int8 builds
    return request.param, model, top1(lambda feed: fp32.run(None, feed), *test_set)


def test_fp32_matches_onnxruntime(trained, test_set):
    name, model, ours = trained
    session = onnxruntime_session(model, num_threads=2)
    reference = top1(lambda feed: session.run(None, feed), *test_set)
    assert reference >= 90, f"{name}: ONNX Runtime top-1 {reference:.2f}%: the shipped model is not a trained one"
    assert abs(ours - reference) <= 0.1, f"{name}: tvm_fuse fp32 top-1 {ours:.2f}%, ONNX Runtime {reference:.2f}%"


@pytest.mark.parametrize("method", ["minmax", "entropy", "percentile"])
def test_int8_top1_within_half_a_point_of_fp32(trained, test_set, calibration, method):
    name, model, fp32 = trained
    int8 = tvm_fuse.build(model, input_shapes=SHAPES,
                          quantize=tvm_fuse.QuantConfig(calibration=calibration, method=method))
    in_int8 = {node for k in int8.fusion_report()["kernels"] if k["int8"] for node in k["onnx_nodes"]}
    missing = dense_convs_of_4k_channels(model) - in_int8
    assert not missing, f"{name}: convs left in fp32: {sorted(missing)}"
    accuracy = top1(lambda feed: int8.run(None, feed), *test_set)
    assert fp32 - accuracy <= MAX_DROP, f"{name}, {method}: int8 top-1 {accuracy:.2f}% against fp32 {fp32:.2f}%"
