"""An XGBoost model of how fast each knob setting runs, so that a task measures the settings
predicted fastest first rather than in random order.

One model per schedule rule (and loop count), trained on every measurement this job and the
log have for this CPU: features are the main block's loop extents (log2) and the knob values,
the target log(ms per GFLOP) so that kernels of different sizes teach one another.
"""

from __future__ import annotations

import math
from collections import defaultdict

import numpy as np

MIN_SAMPLES = 8  # measurements of a rule before its model picks settings


class CostModel:
    def __init__(self, seed: int = 0):
        self._seed = seed
        self._samples: dict[tuple, list[tuple[list[float], float]]] = defaultdict(list)
        self._models: dict[tuple, object] = {}

    def add(self, rule: str, extents: list[int], knobs: dict, latency_ms: float) -> None:
        key, features = _features(rule, extents, knobs)
        gflop = 2 * math.prod(extents) / 1e9
        self._samples[key].append((features, math.log(latency_ms / gflop)))
        self._models.pop(key, None)  # retrained on next use

    def best(self, rule: str, extents: list[int], candidates: list[dict]) -> dict | None:
        """The candidate predicted fastest, or None while the rule has too few measurements."""
        key, _ = _features(rule, extents, candidates[0])
        samples = self._samples.get(key, [])
        if len(samples) < MIN_SAMPLES:
            return None
        model = self._models.get(key)
        if model is None:
            import xgboost  # a dependency of tvm_fuse; imported here, as only tuning uses it

            model = xgboost.XGBRegressor(n_estimators=64, max_depth=4, learning_rate=0.3, random_state=self._seed)
            model.fit(np.array([f for f, _ in samples]), np.array([t for _, t in samples]))
            self._models[key] = model
        predicted = model.predict(np.array([_features(rule, extents, c)[1] for c in candidates]))
        return candidates[int(np.argmin(predicted))]


def _features(rule: str, extents: list[int], knobs: dict) -> tuple[tuple, list[float]]:
    values = [float(v) for _, v in sorted(knobs.items())]
    key = (rule, len(extents), tuple(sorted(knobs)))
    return key, [math.log2(max(e, 1)) for e in extents] + values
