"""`CompiledModel`: a built model, used like an ONNX Runtime `InferenceSession`."""

from __future__ import annotations

import threading
import warnings
from collections.abc import Sequence
from concurrent.futures import Future
from pathlib import Path

import numpy as np
import tvm
from tvm.runtime.vm import VirtualMachine

from . import artifact
from .amx import amx_permitted
from .benchmark import Latency, random_feed, time_runs
from .errors import TvmFuseError
from .feed import check_feed, exact_arrays, output_indices, static_signature
from .fusion_report import FusionReport
from .ir_names import TVM_ALIGNMENT
from .outputs import Spans, tensor_span, unshared
from .streams import Streams
from .target import missing_host_features
from .tensor_info import TensorInfo
from .threads import (
    configure_this_thread,
    in_a_fresh_thread,
    mark_pool_started,
    on_the_forking_thread,
    set_num_threads,
)


class CompiledModel:
    """A model compiled for one CPU target.

    `run(output_names, feed)` returns numpy arrays as ONNX Runtime does; `get_inputs()` and
    `get_outputs()` describe the signature; `export(path)` writes a shared library that
    `tvm_fuse.load(path)` reopens without the ONNX file.
    """

    def __init__(self, library: tvm.runtime.Module, inputs, outputs, target: str, features,
                 report: FusionReport | None = None, precision: str = "fp32", uses_amx: bool = False,
                 weights: Sequence[tvm.runtime.Tensor] = ()):
        self._library = library
        self._weights = tuple(weights)  # the trailing arguments of the library's `main` (`codegen.weights_apart`)
        self._report = report or FusionReport()
        self._inputs: list[TensorInfo] = list(inputs)
        self._outputs: list[TensorInfo] = list(outputs)
        self._signature = static_signature(self._inputs)
        self.target = target
        self.features = frozenset(features)  # ISA features the code may use
        self.precision = precision  # "fp32" or "bf16": what `build(precision=...)` made
        self.uses_amx = uses_amx  # whether kernels run AMX tile programs: they need the OS's leave
        self._fallback: CompiledModel | None = None
        self._compile_fallback = None  # makes `fallback` when first asked, in a model built here
        self._fallback_lock = threading.Lock()
        # A VM runs one call at a time: each thread that runs the model gets its own, and its
        # own input buffers.
        self._per_thread = threading.local()
        self._streams: Streams | None = None  # `run_async`'s, made at its first call
        self._streams_lock = threading.Lock()

    @property
    def fallback(self) -> CompiledModel | None:
        """The same model built without AMX, which runs where the OS denies this process AMX.
        A model built in this process compiles it when first asked: by `export`, or by a run
        without AMX; a model `load`ed has it from its export."""
        with self._fallback_lock:
            if self._compile_fallback is not None:
                self._fallback, self._compile_fallback = self._compile_fallback(), None
            return self._fallback

    @fallback.setter
    def fallback(self, model: CompiledModel | None) -> None:
        with self._fallback_lock:
            self._fallback, self._compile_fallback = model, None

    def compile_fallback_later(self, compile_fallback) -> None:
        """Have `fallback` made by `compile_fallback()` when first asked."""
        with self._fallback_lock:
            self._fallback, self._compile_fallback = None, compile_fallback

    # -- signature -------------------------------------------------------------------------
    def get_inputs(self) -> list[TensorInfo]:
        """The inputs to feed: name, shape (symbolic dims as names) and dtype."""
        return list(self._inputs)

    def get_outputs(self) -> list[TensorInfo]:
        """The outputs `run` returns, in order."""
        return list(self._outputs)

    # -- running ---------------------------------------------------------------------------
    def _machine(self) -> tuple[VirtualMachine, tuple]:
        """This thread's VM and the weights its `main` takes after the inputs: this model's,
        or those of its build without AMX where the OS denies this process AMX."""
        machine = getattr(self._per_thread, "machine", None)
        if machine is None:
            # Asked before any kernel runs: the OS lets a process run tile instructions only
            # once it has asked (`amx_permitted` asks), and without leave they raise SIGILL.
            if self.uses_amx and not amx_permitted():
                denied = (f"this model was compiled for '{self.target}' with kernels on AMX tiles, and this "
                          "process may not run AMX: the CPU lacks it, or the operating system keeps it off "
                          "or refused this process (arch_prctl ARCH_REQ_XCOMP_PERM)")
                if self.fallback is None:
                    raise TvmFuseError(f"{denied}. Build with target='native' to run here.")
                warnings.warn(f"{denied}; running its build without AMX ('{self.fallback.target}')")
                self._per_thread.machine = self.fallback._machine()
                return self._per_thread.machine
            missing = missing_host_features(self.features)
            if missing:
                # Running would die on an illegal instruction: refuse with a reason instead.
                raise TvmFuseError(
                    f"this model was compiled for '{self.target}', which uses {sorted(missing)}; "
                    "this CPU lacks them. Build with target='native' to run here."
                )
            mark_pool_started()
            machine = self._per_thread.machine = VirtualMachine(self._library, tvm.cpu()), self._weights
        return machine

    def _device_inputs(self, arrays: list[np.ndarray]) -> list[tvm.runtime.Tensor]:
        """The inputs as TVM tensors without a fresh allocation per run: an array aligned as
        TVM's kernels assume is passed as it is, any other is copied into this thread's
        buffer for that input (numpy's copy; TVM's `tensor()` allocated, and took several
        times as long right after a run)."""
        buffers = self._per_thread.__dict__.setdefault("inputs", {})
        tensors = []
        for index, array in enumerate(arrays):
            if array.ctypes.data % TVM_ALIGNMENT == 0 and array.flags.writeable:  # DLPack has no read-only
                tensors.append(tvm.runtime.from_dlpack(array))
                continue
            tensor, view = buffers.get(index, (None, None))
            if view is None or view.shape != array.shape or view.dtype != array.dtype:
                tensor = tvm.runtime.empty(array.shape, str(array.dtype))
                view = np.from_dlpack(tensor)
                buffers[index] = tensor, view
            np.copyto(view, array)
            tensors.append(tensor)
        return tensors

    def run(self, output_names, input_feed: dict, run_options=None) -> list[np.ndarray]:
        """Run the model on `input_feed` (name -> array); return the outputs named in
        `output_names` (None: all), as numpy arrays. Threads may run one model at once, and
        a process forked after a run runs it too."""
        del run_options  # accepted for ONNX Runtime compatibility
        wanted = output_indices(self._outputs, output_names)
        arrays = exact_arrays(self._signature, input_feed)
        if arrays is None:
            arrays = check_feed(self._inputs, input_feed)
        if on_the_forking_thread():
            return in_a_fresh_thread(lambda: self._run(arrays, wanted))
        return self._run(arrays, wanted)

    def _run(self, arrays: list[np.ndarray], wanted: list[int]) -> list[np.ndarray]:
        entry = getattr(self._per_thread, "main", None)
        if entry is None:  # looked up once per thread: a VM's function lookup costs a small model's run 10%
            machine, weights = self._machine()
            spans = Spans(tensor_span(w, np.from_dlpack(w).nbytes) for w in weights)
            entry = self._per_thread.main = machine["main"], weights, spans
        main, weights, weight_spans = entry
        configure_this_thread()
        inputs = self._device_inputs(arrays)
        result = main(*inputs, *weights)
        results = list(result) if len(self._outputs) > 1 else [result]
        # Through DLPack: `Tensor.numpy()` cost a tenth of a small model's run.
        outputs = [(array := np.from_dlpack(results[i]), tensor_span(results[i], array.nbytes)) for i in wanted]
        return unshared(outputs, Spans(tensor_span(t, a.nbytes) for t, a in zip(inputs, arrays)), weight_spans)

    def run_async(self, output_names, input_feed: dict) -> Future:
        """`run` on one of the model's streams (`set_streams`): many requests at once, each on
        cores of its own. Returns a Future of the outputs; the run's error is the Future's."""
        with self._streams_lock:
            if self._streams is None:
                self._streams = Streams(self)
            streams = self._streams
        return streams.submit(output_names, input_feed)

    def set_streams(self, count: int | None = None) -> None:
        """Serve `run_async` with `count` streams, each a runner on a disjoint group of the
        CPUs this process may use (None: one per CPU, OpenVINO's THROUGHPUT hint for a small
        model). Runs already queued finish on the old streams."""
        with self._streams_lock:
            old, self._streams = self._streams, Streams(self, count)
        if old is not None:
            old.close()

    def benchmark(self, feed: dict | None = None, warmup: int = 3, repeat: int = 20,
                  num_threads: int | None = None) -> Latency:
        """Latency of `run` on `feed` (random inputs if None) after `warmup` untimed runs."""
        if num_threads is not None:
            set_num_threads(num_threads)
        feed = feed if feed is not None else random_feed(self._inputs)
        return Latency.of(time_runs(lambda: self.run(None, feed), warmup, repeat))

    # -- inspection and export -----------------------------------------------------------
    def fusion_report(self) -> dict:
        """What fusion did, as JSON-ready data: `kernels` ({name, pattern, onnx_nodes}),
        `unfused` ({onnx_node, op_type, reason}), `folded` (nodes with no run-time work),
        `layout_transforms`, `disabled_families` and `build_seconds` (per phase of the build,
        `build_timings`). `tvm-fuse explain` prints it."""
        return self._report.to_json()

    def assembly(self) -> str:
        """The generated x86 assembly of every kernel, as text."""
        from .codegen import llvm_modules  # here: a process that only serves has no compiler

        module = getattr(self._library, "mod", self._library)  # Executable, or a loaded Module
        sources = [m.inspect_source("asm") for m in llvm_modules(module)]
        if not sources:
            raise TvmFuseError("assembly is only available for a model built in this process, not one loaded from a library")
        return "\n".join(sources)

    def export(self, path: str | Path) -> Path:
        """Write the model to `path` (a shared library) and its signature beside it
        (`<path without suffix>.json`); return the library path. Atomic: an interrupted
        export leaves the previous files, never half-written ones."""
        return artifact.export(self, Path(path))

    def metadata(self) -> dict:
        """What `load` needs besides the library: signature and target."""
        return {
            "target": self.target,
            "features": sorted(self.features),
            "precision": self.precision,
            "uses_amx": self.uses_amx,
            **({"fallback": self.fallback.metadata()} if self.fallback is not None else {}),
            "inputs": [_info_to_json(i) for i in self._inputs],
            "outputs": [_info_to_json(o) for o in self._outputs],
            "fusion_report": self._report.to_json(),
        }

    @classmethod
    def from_metadata(cls, library, metadata: dict, weights=(), fallback: tuple | None = None) -> CompiledModel:
        """The model of `library`, `weights` and its `metadata`; `fallback`: the library and
        weights of its build without AMX, described by `metadata["fallback"]`."""
        model = cls(
            library,
            [_info_from_json(i) for i in metadata["inputs"]],
            [_info_from_json(o) for o in metadata["outputs"]],
            metadata["target"],
            metadata["features"],
            FusionReport.from_json(metadata["fusion_report"]) if "fusion_report" in metadata else None,
            metadata.get("precision", "fp32"),  # exports before bf16 builds existed
            metadata.get("uses_amx", False),  # exports before AMX kernels existed
            weights,
        )
        if fallback is not None:
            fallback_library, fallback_weights = fallback
            model.fallback = cls.from_metadata(fallback_library, metadata["fallback"], fallback_weights)
        return model

    def __repr__(self) -> str:
        ins = ", ".join(f"{i.name}{list(i.shape)}" for i in self._inputs)
        return f"CompiledModel(target='{self.target}', precision='{self.precision}', inputs=[{ins}])"


def _info_to_json(info: TensorInfo) -> dict:
    return {"name": info.name, "shape": list(info.shape), "dtype": info.dtype, "index_limit": info.index_limit,
            "dim_limits": [list(limit) for limit in info.dim_limits]}


def _info_from_json(data: dict) -> TensorInfo:
    return TensorInfo(data["name"], tuple(data["shape"]), data["dtype"], data.get("index_limit"),
                      tuple(tuple(limit) for limit in data.get("dim_limits", [])))
