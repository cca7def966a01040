"""Group every match of the fusion table into a composite function (`FuseOpsByPattern`).

Constants stay outside the composite (`bind_constants=False`) so weights remain module
constants that later passes can repack once at build time.
"""

from __future__ import annotations

from collections.abc import Collection

import tvm
from tvm import relax

from ..patterns.table import fusion_patterns


def FusePatterns(disabled: Collection[str] = ()) -> tvm.transform.Pass:
    """Fuse with every family of the table except those in `disabled`."""
    fuse = relax.transform.FuseOpsByPattern(fusion_patterns(disabled), bind_constants=False)

    @tvm.transform.module_pass(opt_level=0, name="tvm_fuse.FusePatterns")
    def fuse_patterns(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        return fuse(mod)

    return fuse_patterns
