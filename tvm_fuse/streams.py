"""Many requests at once on disjoint cores (`Streams`), as OpenVINO's THROUGHPUT hint runs them:
each stream is a thread with its own VM whose kernels run on a group of cores of its own, and a
request goes to the next free stream. One request on all cores pays each kernel's start and
join on every core; requests side by side on one core each (the default) pay none, and keep
every core busy between kernels too."""

from __future__ import annotations

import itertools
import os
import threading
from concurrent.futures import Future, ThreadPoolExecutor

from .target import available_cpus
from .threads import pin_this_thread


def core_groups(cpus: list[int], count: int) -> list[list[int]]:
    """`cpus` split into `count` disjoint groups of neighbouring CPUs, as even as they divide."""
    if not 1 <= count <= len(cpus):
        raise ValueError(f"streams must be between 1 and the {len(cpus)} CPUs this process may use, got {count}")
    size, extra = divmod(len(cpus), count)
    starts = [i * size + min(i, extra) for i in range(count + 1)]
    return [cpus[starts[i]:starts[i + 1]] for i in range(count)]


class Streams:
    """`count` streams (default: one per CPU this process may use) that run `model`: `submit`
    returns a Future of `model.run(...)`. Thread-safe; in a forked child the streams start anew."""

    def __init__(self, model, count: int | None = None):
        self.model = model
        cpus = available_cpus()
        self.groups = core_groups(cpus, count or len(cpus))
        self._lock = threading.Lock()
        self._executor: ThreadPoolExecutor | None = None
        self._pid = None

    @property
    def count(self) -> int:
        return len(self.groups)

    def submit(self, output_names, input_feed: dict) -> Future:
        """Queue one run of the model; its Future holds the outputs (or the run's error)."""
        return self._runners().submit(self.model.run, output_names, input_feed)

    def _runners(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._executor is None or self._pid != os.getpid():
                groups = itertools.cycle(self.groups)  # each runner thread takes the next group as it starts
                self._executor = ThreadPoolExecutor(self.count, thread_name_prefix="tvm_fuse-stream",
                                                    initializer=lambda: pin_this_thread(next(groups)))
                self._pid = os.getpid()
            return self._executor

    def close(self) -> None:
        """Finish the queued runs and stop the streams' threads."""
        with self._lock:
            executor, self._executor = self._executor, None
        if executor is not None and self._pid == os.getpid():
            executor.shutdown(wait=True)

    def __enter__(self) -> Streams:
        return self

    def __exit__(self, *error) -> None:
        self.close()
