"""Shared by the pass tests: build a small Relax module, read its bindings, run it."""

from __future__ import annotations

import numpy as np
import tvm
from tvm import relax

from tvm_fuse import provenance


def module(params: dict, build) -> tvm.IRModule:
    """`main(params...)` returning what `build(bb, *params)` emits, as the importer lays it out."""
    bb = relax.BlockBuilder()
    args = [relax.Var(name, relax.TensorType(shape, "float32")) for name, shape in params.items()]
    with bb.function("main", args):
        with bb.dataflow():
            output = bb.emit_output(build(bb, *args))
        bb.emit_func_output(output)
    return bb.get()


def binding_names(mod: tvm.IRModule) -> list[str]:
    return [b.var.name for block in mod["main"].body.blocks for b in block.bindings]


def assert_every_binding_tagged(mod: tvm.IRModule):
    """Every binding in main names its ONNX node, but the returned variable."""
    main = mod["main"]
    for binding in (b for block in main.body.blocks for b in block.bindings):
        if not binding.var.same_as(main.body.body):
            assert provenance.node_index(binding.var) is not None, binding.var.name


def run(mod: tvm.IRModule, feed: dict) -> list[np.ndarray]:
    """`mod` compiled by TVM alone for the host, on `feed` (in order); its outputs as a list."""
    vm = relax.VirtualMachine(tvm.compile(mod, target="llvm"), tvm.cpu())
    out = vm["main"](*[tvm.runtime.tensor(value) for value in feed.values()])
    return [out.numpy()] if hasattr(out, "numpy") else [o.numpy() for o in out]
