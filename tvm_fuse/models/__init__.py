"""Models that need no download: the `onnx` wheel's light models with seeded weights, and
models built here with onnx.helper. Tests, benchmarks and the CLI's default use them."""

from __future__ import annotations

import onnx

from .light import LIGHT_MODELS, light_model


def model_names() -> list[str]:
    """Every name `named_model` accepts."""
    from .built import BUILT_MODELS

    return sorted(LIGHT_MODELS) + sorted(BUILT_MODELS)


def named_model(name: str, batch: int = 1, seed: int = 0) -> onnx.ModelProto:
    """The model called `name` (see `model_names`); built models take a static `batch`,
    the light models have a fixed batch of 1."""
    from .built import BUILT_MODELS

    if name in LIGHT_MODELS:
        if batch != 1:
            raise ValueError(f"the light model {name!r} has a fixed batch of 1")
        return light_model(name, seed)
    if name in BUILT_MODELS:
        return BUILT_MODELS[name](batch=batch, seed=seed)
    raise ValueError(f"unknown model {name!r}; the named models are {', '.join(model_names())}")


__all__ = ["LIGHT_MODELS", "light_model", "model_names", "named_model"]
