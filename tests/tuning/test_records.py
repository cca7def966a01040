"""Tuning logs keep every finished record: appended durably, shared by concurrent jobs, and
read past a torn or corrupt line with a warning."""

from __future__ import annotations

import multiprocessing

import pytest

from tests.tuner.worker_jobs import append_records
from tvm_fuse.tuning.records import Record, append, read


def test_a_record_reads_back_as_written(tmp_path):
    path = tmp_path / "log.jsonl"
    records = [Record("w", "avx512", "skylake-avx512", {"width_tile": 7}, 0.25),
               Record("w", "avx512", "skylake-avx512", {"width_tile": 5}, None, "timed out after 60 s")]
    for record in records:
        append(path, record)
    assert read([path]) == records


def test_a_corrupt_line_is_skipped_with_a_warning_naming_it(tmp_path):
    path = tmp_path / "log.jsonl"
    append(path, Record("w", "avx512", "x", {"a": 1}, 0.5))
    with open(path, "a") as log:
        log.write('{"version": 1, "workload": "w", "isa": "av\n')  # a torn line
        log.write('{"version": 99, "workload": "w"}\n')  # a future format
    append(path, Record("w", "avx512", "x", {"a": 2}, 0.4))
    with pytest.warns(UserWarning, match=r"log.jsonl:[23]: skipped a corrupt tuning record") as caught:
        records = read([path])
    assert [r.knobs for r in records] == [{"a": 1}, {"a": 2}]
    assert sorted(str(w.message).split(": skipped")[0][-1] for w in caught) == ["2", "3"]


def test_two_jobs_appending_to_one_log_lose_nothing(tmp_path):
    path = tmp_path / "log.jsonl"
    context = multiprocessing.get_context("spawn")
    writers = [context.Process(target=append_records, args=(path, w, 200)) for w in range(2)]
    for writer in writers:
        writer.start()
    for writer in writers:
        writer.join(120)
    records = read([path])
    assert sorted((r.workload, r.knobs["i"]) for r in records) == [(f"w{w}", i) for w in range(2) for i in range(200)]
