"""Put the ops of a graph with an If into dataflow blocks.

The importer emits a graph with an If as one plain binding block (an If cannot sit in a dataflow
block), and fusion and the layout passes rewrite only dataflow blocks: every op of such a graph
outside its branches ran unfused, in NCHW, on TVM's generic kernels. TVM's ConvertToDataflow
gathers the ops before and after each If into dataflow blocks; it runs here only on the
functions that have a plain block, since it also drops a function's trivial rebinding of its
output, and with it the ONNX node that the rebound variable's name records (`provenance`): a
branch's last op."""

from __future__ import annotations

import tvm
from tvm import relax


def DataflowAroundIfs() -> tvm.transform.Pass:
    @tvm.transform.module_pass(opt_level=0, name="tvm_fuse.DataflowAroundIfs")
    def convert(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        plain = {gvar: func for gvar, func in mod.functions_items() if isinstance(func, relax.Function)
                 and any(not isinstance(block, relax.DataflowBlock) for block in func.body.blocks)}
        if not plain:
            return mod
        converted = relax.transform.ConvertToDataflow(min_size=1)(tvm.IRModule(plain))
        builder = relax.BlockBuilder(mod)
        for gvar in plain:
            builder.update_func(gvar, converted[gvar.name_hint])
        return builder.get()

    return convert
