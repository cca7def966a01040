"""tvm_fuse next to other runtimes (ONNX Runtime, OpenVINO, tvm_fuse in int8) on the same
model, inputs and thread count (`time_alternating`), and the differences of their outputs.

They alternate in short blocks (a few runs of ours, a few of theirs, ...) so that a noisy
neighbour on a shared machine slows all alike; the ratio of medians is the figure to read,
not the times. Both runtimes keep their idle threads spinning after a run (their default, as
deployed), which can outlast a whole block of a light model and take the cores from the other
runtime's runs (ONNX Runtime's times of a small transformer more than tripled). Each block therefore
starts after a pause long enough for the other's threads to go to sleep, then an untimed run.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Iterable, Mapping
from typing import Protocol

import numpy as np
import onnx

from ..benchmark import Latency
from ..threads import set_num_threads

SETTLE_S = 0.05


class Runtime(Protocol):
    """A `CompiledModel` or an ONNX Runtime `InferenceSession`: both run as `run(None, feed)`."""

    def run(self, output_names, feed: dict) -> list[np.ndarray]: ...


def onnxruntime_session(model: onnx.ModelProto, num_threads: int, spinning: bool = True, optimized: bool = True):
    """An ONNX Runtime CPU session with all graph optimizations, as users deploy it; without
    `spinning`, its idle threads sleep at once (`session.intra_op.allow_spinning` 0); without
    `optimized`, it runs every node of the graph as written (no fusion, no folding)."""
    try:
        import onnxruntime as ort
    except ImportError:
        raise ImportError(
            "comparing with ONNX Runtime needs it installed: pip install 'tvm_fuse[bench]'"
        ) from None
    options = ort.SessionOptions()
    options.graph_optimization_level = (ort.GraphOptimizationLevel.ORT_ENABLE_ALL if optimized
                                        else ort.GraphOptimizationLevel.ORT_DISABLE_ALL)
    options.intra_op_num_threads = num_threads
    options.inter_op_num_threads = 1
    options.log_severity_level = 3  # errors only: the light models carry unused initializers
    if not spinning:
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


class OpenVINOSession:
    """An ONNX model compiled by OpenVINO's CPU plugin for latency on `num_threads` threads,
    run like an ONNX Runtime session: `run(None, feed)` returns the outputs in the graph's order.
    `precision` is OpenVINO's inference precision hint: "f32", or "bf16" to let it compute in
    bfloat16 where the CPU supports it."""

    def __init__(self, model: onnx.ModelProto, num_threads: int, precision: str = "f32",
                 calibration: list[dict] | None = None):
        """`calibration`: feeds on which NNCF's post-training quantization (`nncf.quantize`, its
        defaults: int8 activations and per-channel weights) makes the model int8 first."""
        try:
            import openvino
        except ImportError:
            raise ImportError("comparing with OpenVINO needs it installed: pip install 'tvm_fuse[bench]'") from None
        core = openvino.Core()
        config = {"INFERENCE_PRECISION_HINT": precision, "INFERENCE_NUM_THREADS": num_threads,
                  "PERFORMANCE_HINT": "LATENCY"}
        # read_model takes the serialized ONNX model as bytes (a str would be read as a path).
        read = core.read_model(model.SerializeToString())
        if calibration is not None:
            import nncf

            read = nncf.quantize(read, nncf.Dataset(calibration), subset_size=len(calibration))
        self.compiled = core.compile_model(read, "CPU", config)
        self.request = self.compiled.create_infer_request()
        self.output_names = [output.name for output in model.graph.output]

    def run(self, output_names, feed: dict) -> list[np.ndarray]:
        result = self.request.infer(feed, share_inputs=True)  # reads the feed's arrays in place
        return [result[name] for name in output_names or self.output_names]


def differences(ours: list[np.ndarray], reference: list[np.ndarray]) -> tuple[float, float]:
    """(max absolute difference, max difference relative to each output's largest magnitude)."""
    abs_diff = rel_diff = 0.0
    for a, b in zip(ours, reference):
        diff = float(np.max(np.abs(a.astype(np.float64) - b))) if a.size else 0.0
        scale = float(np.max(np.abs(b))) if b.size else 0.0
        abs_diff = max(abs_diff, diff)
        rel_diff = max(rel_diff, diff / scale if scale else diff)
    return abs_diff, rel_diff


def time_alternating(runtimes: Mapping[str, Runtime], feed: dict, num_threads: int, warmup: int = 3,
                     repeat: int = 20, block: int = 5) -> dict[str, Latency]:
    """Each runtime's latency on `feed` (same keys as `runtimes`): `warmup` untimed runs of
    each, then `repeat` timed runs each, in blocks of `block` that take turns in the order of
    `runtimes`. tvm_fuse runs on `num_threads`; ONNX Runtime sessions keep the threads they
    were made with (`onnxruntime_session(model, num_threads)`)."""
    set_num_threads(num_threads)
    runners = {name: functools.partial(runtime.run, None, feed) for name, runtime in runtimes.items()}
    for _ in range(warmup):
        for run in runners.values():
            run()
    times: dict[str, list[float]] = {name: [] for name in runners}
    done = 0
    while done < repeat:
        count = min(block, repeat - done)
        for name, run in runners.items():
            time.sleep(SETTLE_S)  # the other runtimes' spinning threads go to sleep
            run()  # untimed: wakes this runtime's threads
            for _ in range(count):
                start = time.perf_counter()
                run()
                times[name].append((time.perf_counter() - start) * 1e3)
        done += count
    return {name: Latency.of(t) for name, t in times.items()}


def top1_agreement(runtime: Runtime, reference: Runtime, feeds: Iterable[dict]) -> tuple[float, int]:
    """(the share of rows whose argmax `runtime` and `reference` agree on, the rows compared)
    over `feeds`, for models with one output of shape (batch, classes), trailing 1s allowed."""
    agreed = rows = 0
    for feed in feeds:
        (ours,), (theirs,) = runtime.run(None, feed), reference.run(None, feed)
        ours, theirs = ours.reshape(len(ours), -1), theirs.reshape(len(theirs), -1)
        agreed += int(np.sum(ours.argmax(axis=1) == theirs.argmax(axis=1)))
        rows += len(ours)
    return (agreed / rows if rows else float("nan")), rows
