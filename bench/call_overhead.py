"""What one `run()` costs apart from the model's arithmetic: a static model whose only kernel
adds 16 numbers, run by tvm_fuse, ONNX Runtime and OpenVINO in the same process, the three
taking turns in rounds of `--calls` calls each; the best round's time per call is printed.
tvm_fuse's is split into its VM's call alone (the kernel, its output's allocation) and the
Python around it (the feed's check, DLPack wrapping, the output's copy to numpy).

    python bench/call_overhead.py [--threads 2] [--calls 20000] [--rounds 5] [--no-openvino]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import tvm_fuse
from tvm_fuse.benchmarking.compare import OpenVINOSession, onnxruntime_session
from tvm_fuse.target import host_cpu
from tvm_fuse.threads import set_num_threads


def tiny_model() -> onnx.ModelProto:
    """y = x + b, x [1, 16] fp32: a kernel of a few nanoseconds."""
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "b"], ["y"], name="add")], "tiny",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16])],
        [numpy_helper.from_array(np.ones((1, 16), np.float32), "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    return model


def per_call_us(calls: dict, count: int, rounds: int) -> dict[str, float]:
    """name -> the best round's microseconds per call, the callables taking turns each round."""
    for call in calls.values():
        for _ in range(count // 10):
            call()
    best = {name: float("inf") for name in calls}
    for _ in range(rounds):
        for name, call in calls.items():
            start = time.perf_counter()
            for _ in range(count):
                call()
            best[name] = min(best[name], (time.perf_counter() - start) / count * 1e6)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--calls", type=int, default=20000, help="calls per round and runtime")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--no-openvino", action="store_true")
    args = parser.parse_args()
    source = tiny_model()
    model = tvm_fuse.build(source, "native")
    set_num_threads(args.threads)
    feed = {"x": np.random.default_rng(0).standard_normal((1, 16)).astype(np.float32)}
    machine, weights = model._machine()
    machine_main = machine["main"]
    x = [*model._device_inputs([feed["x"]]), *weights]
    calls = {"tvm_fuse run()": lambda: model.run(None, feed),
             "tvm_fuse VM call alone": lambda: machine_main(*x),
             "ONNX Runtime run()": (lambda session: lambda: session.run(None, feed))(
                 onnxruntime_session(source, args.threads))}
    if not args.no_openvino:
        calls["OpenVINO infer()"] = (lambda session: lambda: session.run(None, feed))(
            OpenVINOSession(source, args.threads))
    times = per_call_us(calls, args.calls, args.rounds)
    print(f"{host_cpu()}, {args.threads} threads; best of {args.rounds} rounds of {args.calls} calls")
    for name, us in times.items():
        print(f"{name:<24} {us:6.2f} us per call")
    print(f"tvm_fuse run() around its VM call: {times['tvm_fuse run()'] - times['tvm_fuse VM call alone']:.2f} us")


if __name__ == "__main__":
    main()
