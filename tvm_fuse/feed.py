"""Check a run's inputs against the model's signature before they reach compiled code.

Compiled kernels trust their arguments: a wrong shape there reads out of bounds. Every check
a kernel would otherwise skip happens here, with the input's name in the message.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from .errors import InputError
from .tensor_info import TensorInfo


def _describe(inputs: list[TensorInfo]) -> str:
    return ", ".join(f"{i.name} {list(i.shape)} {i.dtype}" for i in inputs)


def check_feed(inputs: list[TensorInfo], feed) -> list[np.ndarray]:
    """The arrays of `feed` in the order of `inputs`, contiguous and checked."""
    if not isinstance(feed, Mapping):
        raise InputError(f"inputs are a dict of name -> array, not {type(feed).__name__}")
    names = [i.name for i in inputs]
    unknown = [name for name in feed if name not in names]
    missing = [name for name in names if name not in feed]
    if unknown or missing:
        problems = []
        if missing:
            problems.append(f"missing input(s) {missing}")
        if unknown:
            problems.append(f"unknown input(s) {unknown}")
        raise InputError(f"{' and '.join(problems)}; the model takes {_describe(inputs)}")

    bound: dict[str, tuple[int, str]] = {}  # symbolic dim -> (value, the input that set it)
    arrays = []
    for info in inputs:
        value = feed[info.name]
        if not isinstance(value, np.ndarray):
            try:
                value = np.asarray(value, dtype=info.dtype)
            except (TypeError, ValueError) as error:
                raise InputError(f"input {info.name!r} cannot become a {info.dtype} array: {error}") from None
        if value.dtype != np.dtype(info.dtype):
            raise InputError(
                f"input {info.name!r} has dtype {value.dtype}, but the model expects {info.dtype}; "
                f"convert it with .astype(np.{info.dtype})"
            )
        if value.ndim != len(info.shape):
            raise InputError(
                f"input {info.name!r} has shape {list(value.shape)} (rank {value.ndim}), but the "
                f"model expects rank {len(info.shape)}: {list(info.shape)}"
            )
        for axis, (have, want) in enumerate(zip(value.shape, info.shape)):
            if isinstance(want, int):
                if have != want:
                    raise InputError(
                        f"input {info.name!r} has shape {list(value.shape)}, but the model expects "
                        f"{list(info.shape)} (axis {axis} must be {want})"
                    )
            elif want != "?" and want in bound and bound[want][0] != have:
                value_seen, where = bound[want]
                raise InputError(
                    f"input {info.name!r} has {want}={have} at axis {axis}, but input {where!r} "
                    f"set {want}={value_seen}; inputs that share a dim must agree"
                )
            elif have == 0:
                raise InputError(f"input {info.name!r} is empty at axis {axis} ({want})")
            else:
                bound.setdefault(want, (have, info.name))
        for dim, largest, node in info.dim_limits:
            have = value.shape[info.shape.index(dim)]
            if have > largest:
                raise InputError(f"input {info.name!r} has {dim}={have}, but the model's node {node!r} reads at most "
                                 f"{largest} along it (a table of {largest} rows): {dim} must be at most {largest}")
        limit = info.index_limit
        if limit is not None and value.size and (value.min() < -limit or value.max() >= limit):
            raise InputError(
                f"input {info.name!r} indexes a table of {limit} rows, but has values from "
                f"{value.min()} to {value.max()}; valid values lie in [{-limit}, {limit - 1}]"
            )
        arrays.append(np.require(value, requirements="C"))  # ascontiguousarray makes 0-d arrays 1-d
    return arrays


def static_signature(inputs: list[TensorInfo]) -> tuple | None:
    """(name, dtype, shape) of each input, where every shape is static and no input indexes a
    table: what `exact_arrays` matches a feed against. None where `check_feed` must look."""
    if any(info.index_limit is not None or not all(isinstance(d, int) for d in info.shape) for info in inputs):
        return None
    return tuple((info.name, np.dtype(info.dtype), tuple(info.shape)) for info in inputs)


def exact_arrays(signature: tuple | None, feed) -> list[np.ndarray] | None:
    """The arrays of `feed` in order, where each is already a C-contiguous array of its input's
    dtype and static shape and the feed names no other input: what `check_feed` would return,
    at a fraction of its cost (a small model's run is a few microseconds). None otherwise."""
    if signature is None or type(feed) is not dict or len(feed) != len(signature):
        return None
    arrays = []
    for name, dtype, shape in signature:
        value = feed.get(name)
        if type(value) is not np.ndarray or value.dtype != dtype or value.shape != shape or not value.flags.c_contiguous:
            return None
        arrays.append(value)
    return arrays


def output_indices(outputs: list[TensorInfo], output_names) -> list[int]:
    """Positions of `output_names` (None: all) among `outputs`."""
    if output_names is None:
        return list(range(len(outputs)))
    if isinstance(output_names, str):
        raise InputError(f"output_names is a list of names; got the string {output_names!r}, use [{output_names!r}]")
    names = [o.name for o in outputs]
    unknown = [n for n in output_names if n not in names]
    if unknown:
        raise InputError(f"unknown output(s) {unknown}; the model's outputs are {names}")
    return [names.index(n) for n in output_names]
