"""Models that need no download: the `onnx` wheel's light models with seeded weights, and
models built here with onnx.helper. Tests, benchmarks and the CLI's default use them.
Apart from those (and from `named_model`): two small CNNs trained on Fashion-MNIST, shipped
as ONNX files, for measuring int8 accuracy on real data (`fashion_mnist_model`)."""

from __future__ import annotations

from pathlib import Path

import onnx

from .light import LIGHT_MODELS, light_model


def model_names() -> list[str]:
    """Every name `named_model` accepts."""
    from .built import BUILT_MODELS

    return sorted(LIGHT_MODELS) + sorted(BUILT_MODELS)


def named_model(name: str, batch: int = 1, seed: int = 0) -> onnx.ModelProto:
    """The model called `name` (see `model_names`) at a static `batch`: the built models are
    made for it; the light models, exported at batch 1, are rebatched (`frontend.batch`)."""
    from ...frontend.importer import graph_inputs, set_input_shapes
    from .built import BUILT_MODELS

    if name in LIGHT_MODELS:
        model = light_model(name, seed)
        if batch == 1:
            return model
        (data,) = graph_inputs(model)
        return set_input_shapes(model, {data.name: (batch, *data.shape[1:])})
    if name in BUILT_MODELS:
        return BUILT_MODELS[name](batch=batch, seed=seed)
    raise ValueError(f"unknown model {name!r}; the named models are {', '.join(model_names())}")


FASHION_MNIST_DIR = Path(__file__).parent / "fashion_mnist"
FASHION_MNIST_MODELS = ("resnet", "mobilenet")  # trained by `python bench/fashion_mnist.py train`


def fashion_mnist_model(name: str) -> onnx.ModelProto:
    """The trained CNN `name` (see `FASHION_MNIST_MODELS`): image float32 [batch, 1, 28, 28],
    standardized as `tvm_fuse.benchmarking.datasets.fashion_mnist.load` gives it -> logits [batch, 10]."""
    if name not in FASHION_MNIST_MODELS:
        raise ValueError(f"unknown Fashion-MNIST model {name!r}; they are {', '.join(FASHION_MNIST_MODELS)}")
    return onnx.load(FASHION_MNIST_DIR / f"{name}.onnx")


__all__ = ["FASHION_MNIST_MODELS", "LIGHT_MODELS", "fashion_mnist_model", "light_model", "model_names",
           "named_model"]
