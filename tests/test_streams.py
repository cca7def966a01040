"""Streams (`tvm_fuse.streams`, `CompiledModel.run_async`): requests at once, each stream's
kernels on a disjoint group of cores, every answer equal to `run`'s."""

from __future__ import annotations

import os
import pickle
import threading

import numpy as np
import pytest

import tvm_fuse
from tests.conftest import dense_model
from tvm_fuse.streams import Streams, core_groups
from tvm_fuse.target import available_cpus
from tvm_fuse.threads import pin_this_thread

FEED = {"x": np.random.default_rng(2).standard_normal((256, 256)).astype(np.float32)}


@pytest.fixture(scope="module")
def model():
    # Large enough that its kernel runs in parallel where a stream has several cores.
    return tvm_fuse.build(dense_model((256,), 256, 512))


@pytest.mark.parametrize("cpus, count, groups", [
    ([0, 1], 2, [[0], [1]]),
    ([0, 1, 2, 3, 4], 2, [[0, 1, 2], [3, 4]]),
    ([4, 5, 6, 7], 1, [[4, 5, 6, 7]]),
    ([0, 2, 4, 6, 8, 10], 3, [[0, 2], [4, 6], [8, 10]]),
])
def test_core_groups_are_disjoint_neighbours_covering_every_cpu(cpus, count, groups):
    assert core_groups(cpus, count) == groups


@pytest.mark.parametrize("count", [0, 3])
def test_more_streams_than_cpus_or_none_are_refused(count):
    with pytest.raises(ValueError, match="streams must be between 1 and the 2 CPUs"):
        core_groups([0, 1], count)


def test_run_async_answers_every_request_as_run_does(model):
    expected = model.run(None, FEED)[0]
    futures = [model.run_async(None, FEED) for _ in range(12)]
    for future in futures:
        np.testing.assert_array_equal(future.result(timeout=60)[0], expected)


def test_an_error_of_a_request_is_its_futures(model):
    with pytest.raises(tvm_fuse.InputError):
        model.run_async(None, {"x": np.ones((3, 3), np.float32)}).result(timeout=60)


def test_each_stream_runs_on_its_own_cores(model):
    """A stream's thread, and its kernels' threads, stay on its group: the thread's affinity
    is the group after it is pinned, and the model still answers there."""
    cpus = available_cpus()
    seen = {}

    def pinned_run(group):
        pin_this_thread(group)
        seen[tuple(group)] = (sorted(os.sched_getaffinity(0)), model.run(None, FEED)[0])

    threads = [threading.Thread(target=pinned_run, args=(group,)) for group in core_groups(cpus, len(cpus))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    expected = model.run(None, FEED)[0]
    assert sorted(seen) == [(cpu,) for cpu in cpus]
    for group, (affinity, output) in seen.items():
        assert affinity == list(group)
        np.testing.assert_array_equal(output, expected)


def test_set_streams_changes_the_count_and_queued_requests_finish(model):
    expected = model.run(None, FEED)[0]
    queued = [model.run_async(None, FEED) for _ in range(4)]
    model.set_streams(1)
    again = model.run_async(None, FEED)
    for future in [*queued, again]:
        np.testing.assert_array_equal(future.result(timeout=60)[0], expected)
    model.set_streams()
    with pytest.raises(ValueError, match="streams must be between"):
        model.set_streams(len(available_cpus()) + 1)


def test_streams_serve_in_a_forked_child(model):
    """Streams started in the parent start anew in a child: their threads stayed behind."""
    expected = model.run_async(None, FEED).result(timeout=60)[0]
    read, write = os.pipe()
    child = os.fork()
    if child == 0:
        try:
            os.write(write, pickle.dumps(model.run_async(None, FEED).result(timeout=60)[0]))
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as answer:
        data = answer.read()
    os.waitpid(child, 0)
    np.testing.assert_array_equal(pickle.loads(data), expected)


def test_a_streams_object_closes_after_its_requests(model):
    expected = model.run(None, FEED)[0]
    with Streams(model, 1) as streams:
        future = streams.submit(None, FEED)
    np.testing.assert_array_equal(future.result(timeout=0)[0], expected)
