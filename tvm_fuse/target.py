"""Targets: the familiar `llvm -mcpu=...` string to a TVM 0.27 `Target`, and CPU ISA features.

TVM 0.27 accepts only the dict form of a target; users know the string form from TVM's
tutorials and from every other tool. `parse_target` takes either (or a `Target`, or None /
"native" for this machine) and always returns a `Target` of kind llvm.
"""

from __future__ import annotations

import os
import shlex
from typing import Any

import tvm
from tvm.base import _RUNTIME_ONLY

from .amx import amx_permitted
from .errors import TargetError

# Our ISA names -> the LLVM feature that implies them.
ISA_FEATURES = {
    "avx2": "avx2",
    "fma": "fma",
    "avx512f": "avx512f",
    "avx512bw": "avx512bw",
    "avx512vl": "avx512vl",
    "avx512_vnni": "avx512vnni",
    "avx512_bf16": "avx512bf16",
    "amx": "amx-int8",
    "amx_bf16": "amx-bf16",
}

_INT_OPTIONS = {"num-cores", "opt-level"}
_LIST_OPTIONS = {"mattr", "keys", "libs", "cl-opt"}


def _llvm_reported_features() -> dict[str, bool]:
    features = tvm.get_global_func("tvm.codegen.llvm.GetHostCPUFeatures")()
    return {str(name): bool(enabled) for name, enabled in features.items()}


def _host_llvm_features() -> dict[str, bool]:
    """LLVM's features of this CPU, each on or off; AMX's on only where the OS lets this
    process use it (`amx.amx_permitted`): LLVM reads CPUID, which ignores the OS."""
    features = _llvm_reported_features()
    if not amx_permitted():
        features = {name: on and not _is_amx(name) for name, on in features.items()}
    return features


def host_cpu() -> str:
    """LLVM's name for this machine's CPU (e.g. `skylake-avx512`, `znver5`)."""
    return str(tvm.get_global_func("tvm.codegen.llvm.GetHostCPUName")())


def host_features() -> frozenset[str]:
    """The ISA features (names of `ISA_FEATURES`) this machine can execute."""
    if _RUNTIME_ONLY:
        return _cpuinfo_features()
    llvm = _host_llvm_features()
    return frozenset(name for name, feature in ISA_FEATURES.items() if llvm.get(feature))


CPUINFO_FLAGS = {name: {"amx": "amx_int8"}.get(name, name) for name in ISA_FEATURES}  # Linux's names


def _cpuinfo_features() -> frozenset[str]:
    """`host_features` from the flags Linux lists in /proc/cpuinfo, for a process that has
    TVM's runtime alone (no LLVM to ask); AMX's only where the OS lets this process use it."""
    with open("/proc/cpuinfo") as info:
        flags = next((set(line.split(":", 1)[1].split()) for line in info if line.startswith("flags")), set())
    found = {name for name, flag in CPUINFO_FLAGS.items() if flag in flags}
    return frozenset(found if amx_permitted() else {name for name in found if not name.startswith("amx")})


def available_cpus() -> list[int]:
    """The CPUs this process may run on (its affinity: a container's or taskset's share)."""
    return sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else list(range(os.cpu_count() or 1))


def host_cores() -> int:
    """How many CPUs this process may run on."""
    return len(available_cpus())


def _native_target() -> dict[str, Any]:
    # Every feature spelled out, on or off, as -march=native does: in a VM the CPU name can be
    # older than the CPU (AMX on a host LLVM calls rocketlake), and it implies features the
    # OS may keep off.
    features = sorted(f"{'+' if on else '-'}{name}" for name, on in _host_llvm_features().items())
    return {"kind": "llvm", "mcpu": host_cpu(), "mattr": features, "num-cores": host_cores()}


def _parse_string(text: str) -> dict[str, Any]:
    words = shlex.split(text)
    if not words:
        raise TargetError("empty target string; use e.g. 'llvm -mcpu=skylake-avx512'")
    kind, options = words[0], words[1:]
    if kind == "native":
        if options:
            raise TargetError(f"'native' takes no options, got {' '.join(options)!r}")
        return _native_target()
    spec: dict[str, Any] = {"kind": kind}
    for option in options:
        if not option.startswith("-") or "=" not in option:
            raise TargetError(
                f"cannot read target option {option!r} in {text!r}; options look like -key=value"
            )
        key, value = option.lstrip("-").split("=", 1)
        if key in _INT_OPTIONS:
            try:
                spec[key] = int(value)
            except ValueError:
                raise TargetError(f"target option -{key} takes an integer, got {value!r}") from None
        elif key in _LIST_OPTIONS:
            spec[key] = [v for v in value.split(",") if v]
        else:
            spec[key] = value
    return spec


def parse_target(target: str | dict | tvm.target.Target | None = None) -> tvm.target.Target:
    """Return a TVM `Target` for `target`.

    Accepts `"llvm -mcpu=skylake-avx512 -num-cores=2 -mattr=+avx512f,+avx512bw"`, the dict form,
    a `tvm.target.Target`, or None / "native" for the host CPU with its detected features.
    """
    if isinstance(target, tvm.target.Target):
        spec = dict(target.export())
    elif target is None:
        spec = _native_target()
    elif isinstance(target, str):
        spec = _parse_string(target.strip())
    elif isinstance(target, dict):
        spec = _native_target() if target.get("kind") == "native" else dict(target)
    else:
        raise TargetError(f"target must be a string, dict or tvm.target.Target, not {type(target)}")

    if spec.get("kind") != "llvm":
        raise TargetError(f"tvm_fuse compiles for x86 CPUs: target kind must be 'llvm', not {spec.get('kind')!r}")
    cpu = spec.get("mcpu")
    triple = spec.get("mtriple") or "x86_64-unknown-linux-gnu"
    if cpu and not tvm.get_global_func("target.llvm_is_valid_cpu")(cpu, triple):
        raise TargetError(f"LLVM does not know the CPU -mcpu={cpu!r} (try skylake-avx512, cascadelake, icelake-server, haswell)")
    try:
        return tvm.target.Target(spec)
    except Exception as error:  # TVM reports bad keys as assorted error types
        raise TargetError(f"invalid target {target!r}: {error}") from None


def isa_features(target: tvm.target.Target) -> frozenset[str]:
    """The ISA features (names of `ISA_FEATURES`) code compiled for `target` may use."""
    has = tvm.get_global_func("target.llvm_cpu_has_feature")
    return frozenset(name for name, feature in ISA_FEATURES.items() if has(feature, target))


def vector_lanes(target: tvm.target.Target) -> int:
    """fp32 lanes of the target's widest vectors."""
    return 16 if "avx512f" in isa_features(target) else 8


def isa_class(target: tvm.target.Target) -> str:
    """The CPU class tuning records are kept by: amx, avx512-vnni, avx512 or avx2."""
    features = isa_features(target)
    if "amx" in features:
        return "amx"
    if "avx512_vnni" in features:
        return "avx512-vnni"
    return "avx512" if "avx512f" in features else "avx2"


def target_cpu(target: tvm.target.Target) -> str:
    """The target's -mcpu (LLVM's generic CPU when it names none)."""
    return str(target.attrs.get("mcpu", "generic"))


def target_string(target: tvm.target.Target | str, brief: bool = False) -> str:
    """The familiar string form of `target`, for metadata; `brief` keeps only the features
    turned on that its CPU does not imply (a native target lists a hundred), for reports."""
    if isinstance(target, str):
        target = parse_target(target)
    spec = dict(target.export())
    if brief:
        cpu = tvm.target.Target({"kind": "llvm", "mcpu": target_cpu(target)})
        has = tvm.get_global_func("target.llvm_cpu_has_feature")
        spec["mattr"] = [f for f in spec.get("mattr", []) if f.startswith("+") and not has(f[1:], cpu)]
    words = [str(spec.pop("kind"))]
    for key in ("mcpu", "mtriple", "num-cores", "mattr"):
        value = spec.get(key)
        if value in (None, "", []):
            continue
        words.append(f"-{key}={value if isinstance(value, (str, int)) else ','.join(value)}")
    return " ".join(words)


def _is_amx(feature: str) -> bool:
    """Whether an LLVM feature is one of AMX's (amx-tile, amx-int8, amx-bf16, amx-fp16, ...)."""
    return feature.startswith("amx")


def without_amx(target: tvm.target.Target) -> tvm.target.Target:
    """`target` with every AMX feature turned off: the same CPU's vector (VNNI / AVX512-BF16) code."""
    spec = dict(target.export())
    kept = [f for f in spec.get("mattr", []) if not _is_amx(f.lstrip("+-"))]
    spec["mattr"] = kept + ["-amx-tile", "-amx-int8", "-amx-bf16"]
    return tvm.target.Target(spec)


def missing_host_features(features) -> frozenset[str]:
    """Which of `features` (names of `ISA_FEATURES`) this machine cannot execute."""
    return frozenset(features) - host_features()
