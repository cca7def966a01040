"""For calibration: `main` also returns the tensors the int8 kernels would read and write
(`quantization.points`: convs' data and outputs, dense layers' inputs), and the concats of
their outputs (which they may write on the concat's scale), after its own outputs, so one run
of the fp32 model yields their values."""

from __future__ import annotations

from collections.abc import Collection

import onnx
import tvm
from tvm import relax

from ..quantization.points import (
    MAX_WEIGHT_BOUND_ROWS,
    dense_input,
    quantizable_convs,
    row_quantized_denses,
    tensor_names,
)

_CONCAT = tvm.ir.Op.get("relax.concat")


def ExposeTensors(model: onnx.ModelProto, exclude: Collection[str], exposed: list[str]) -> tvm.transform.Pass:
    """`exposed` receives the names of the returned tensors, in order."""

    @tvm.transform.module_pass(opt_level=0, name="tvm_fuse.ExposeTensors")
    def expose(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        names = tensor_names(mod, model)
        convs = quantizable_convs(mod, model, names, exclude)
        wanted = {n for c in convs for n in (c.data, c.residual, c.output) if n}
        values = {b.var: b.value for block in mod["main"].body.blocks for b in block.bindings}
        wanted |= {names.get(dense_input(mod, values[v]))
                   for v in row_quantized_denses(mod, model, exclude, min_rows=MAX_WEIGHT_BOUND_ROWS + 1)} - {None}
        outputs = {c.var for c in convs}
        wanted |= {names[b.var] for block in mod["main"].body.blocks for b in block.bindings
                   if b.var in names and isinstance(b.value, relax.Call) and b.value.op.same_as(_CONCAT)
                   and all(f in outputs for f in b.value.args[0].fields)}
        by_name: dict[str, relax.Var] = {}
        for var, name in names.items():
            if name in wanted:
                by_name.setdefault(name, var)  # the first: the one a layout copy was made from
        exposed[:] = sorted(by_name)
        main = mod["main"]
        *blocks, last = main.body.blocks
        fields = [main.body.body, *(by_name[n] for n in exposed)]
        results = relax.Var("calibration_outputs", relax.TupleType([f.ty for f in fields]))
        bindings = list(last.bindings) + [relax.VarBinding(results, relax.Tuple(fields))]
        block = relax.DataflowBlock(bindings) if isinstance(last, relax.DataflowBlock) else relax.BindingBlock(bindings)
        body = relax.SeqExpr([*blocks, block], results)
        updated = mod.clone()
        updated["main"] = relax.Function(main.params, body, results.ty, main.is_pure, main.attrs)
        return updated

    return expose
