"""A candidate that raises, crashes or hangs is a failed result; the worker goes on."""

from __future__ import annotations

import pytest

from tests.tuner import worker_jobs
from tvm_fuse.tuner.measure import Worker


@pytest.fixture
def worker():
    running = Worker()
    yield running
    running.close()


def test_a_crash_or_a_hang_fails_that_candidate_only(worker):
    assert worker.run(worker_jobs.square, (3,), timeout=60) == (9, None)
    assert worker.run(worker_jobs.crash, (), timeout=60) == (None, "the worker died (exit code 3)")
    assert worker.run(worker_jobs.hang, (), timeout=1) == (None, "timed out after 1 s")
    value, error = worker.run(worker_jobs.square, ("x",), timeout=60)
    assert value is None and error.startswith("TypeError")
    assert worker.run(worker_jobs.square, (4,), timeout=60) == (16, None)
