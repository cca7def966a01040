"""Jobs for the measurement worker in tests (importable by its spawned process)."""

import os
import time


def square(x):
    return x * x


def crash():
    os._exit(3)


def hang():
    time.sleep(60)


def append_records(path, writer, count):
    from tvm_fuse.tuning.records import Record, append

    for i in range(count):
        append(path, Record(f"w{writer}", "avx512", "skylake-avx512", {"i": i}, 1.0))


def time_or_crash(func_json, target, lanes, knobs, repeat, rpc):
    """Stands in for `time_candidate`: settings with a one-pixel tile crash the worker."""
    if knobs.get("width_tile") == 1:
        os._exit(11)
    return 1.0 / knobs["width_tile"]
