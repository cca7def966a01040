"""One runtime serving batch-1 requests on all the cores, in a process of its own that imports
that runtime alone (`bench/throughput.py` starts it): `python bench/serving.py SPEC.json`.

SPEC: {"runtime": "tvm_fuse" | "onnxruntime" | "openvino", "model": the exported library, ONNX
file or OpenVINO IR, "feed": an .npz file, "streams": N, "requests": M, "precision": for
OpenVINO's hint, "result": where to write the result}. The result (a pickle): (requests per
second, the process's peak resident MB, the first output of one run)."""

from __future__ import annotations

import json
import pickle
import sys
import time
from pathlib import Path

import numpy as np

WARMUP = 2  # requests per stream before timing


def peak_mb() -> float:
    """This process's peak resident memory (VmHWM: ru_maxrss outlives exec, so a child would
    report its parent's)."""
    status = Path("/proc/self/status").read_text()
    return next(int(line.split()[1]) for line in status.splitlines() if line.startswith("VmHWM:")) / 1024


def tvm_fuse_runner(spec: dict, feed: dict):
    import tvm_fuse

    model = tvm_fuse.load(spec["model"])
    model.set_streams(spec["streams"])

    def serve(count: int) -> None:
        for future in [model.run_async(None, feed) for _ in range(count)]:
            future.result()

    return serve, spec["streams"], lambda: model.run(None, feed)[0]


def onnxruntime_runner(spec: dict, feed: dict):
    from concurrent.futures import ThreadPoolExecutor

    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = 1, 1
    session = ort.InferenceSession(spec["model"], options, providers=["CPUExecutionProvider"])
    callers = ThreadPoolExecutor(spec["streams"])

    def serve(count: int) -> None:
        list(callers.map(lambda _: session.run(None, feed), range(count)))

    return serve, spec["streams"], lambda: session.run(None, feed)[0]


def openvino_runner(spec: dict, feed: dict):
    import os

    import openvino

    core = openvino.Core()
    config = {"PERFORMANCE_HINT": "THROUGHPUT", "INFERENCE_NUM_THREADS": len(os.sched_getaffinity(0)),
              "INFERENCE_PRECISION_HINT": "bf16" if spec["precision"] == "bf16" else "f32"}
    compiled = core.compile_model(core.read_model(spec["model"]), "CPU", config)
    queue = openvino.AsyncInferQueue(compiled, compiled.get_property("OPTIMAL_NUMBER_OF_INFER_REQUESTS"))

    def serve(count: int) -> None:
        for _ in range(count):
            queue.start_async(feed)
        queue.wait_all()

    return serve, len(queue), lambda: compiled.create_infer_request().infer(feed)[compiled.outputs[0]]


RUNNERS = {"tvm_fuse": tvm_fuse_runner, "onnxruntime": onnxruntime_runner, "openvino": openvino_runner}


def main() -> None:
    spec = json.loads(Path(sys.argv[1]).read_text())
    feed = dict(np.load(spec["feed"]))
    serve, parallel, run_once = RUNNERS[spec["runtime"]](spec, feed)
    serve(WARMUP * parallel)
    start = time.perf_counter()
    serve(spec["requests"])
    per_second = spec["requests"] / (time.perf_counter() - start)
    Path(spec["result"]).write_bytes(pickle.dumps((per_second, peak_mb(), np.asarray(run_once()))))


if __name__ == "__main__":
    main()
