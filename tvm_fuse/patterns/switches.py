"""Which fusion families are off: `build(disable_fusion=[...])` plus the environment, in the
style MXNet users know (`TVM_FUSE_DISABLE_FUSE_CONV_RELU=1`)."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping

from ..errors import TvmFuseError
from .table import FAMILIES

ENV_PREFIX = "TVM_FUSE_DISABLE_FUSE_"


def env_variable(family: str) -> str:
    return ENV_PREFIX + family.upper()


def disabled_families(disable_fusion: Iterable[str] | str | None = None,
                      environ: Mapping[str, str] | None = None) -> frozenset[str]:
    """Families switched off by the argument (names, or "all") or by `TVM_FUSE_DISABLE_FUSE_*`
    variables set to a true value (`TVM_FUSE_DISABLE_FUSE_ALL=1` turns every family off)."""
    environ = os.environ if environ is None else environ
    requested = [disable_fusion] if isinstance(disable_fusion, str) else list(disable_fusion or ())
    for name, value in environ.items():
        if name.startswith(ENV_PREFIX) and value.strip().lower() not in ("", "0", "false", "no", "off"):
            requested.append(name[len(ENV_PREFIX):].lower())
    unknown = sorted(set(requested) - set(FAMILIES) - {"all"})
    if unknown:
        raise TvmFuseError(f"unknown fusion famil{'y' if len(unknown) == 1 else 'ies'} {unknown}; "
                           f"choose from {', '.join(FAMILIES)} or 'all'")
    return frozenset(FAMILIES) if "all" in requested else frozenset(requested)
