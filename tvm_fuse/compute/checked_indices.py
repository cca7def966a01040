"""Indices computed at run time, checked before a Gather or Scatter uses them: ONNX refuses an
index outside the axis it indexes, where TVM's kernels read or write past the tensor."""

from __future__ import annotations

import tvm
import tvm_ffi
from tvm import s_tir, te, tirx

CHECKED_INDICES = "checked_indices"  # the kernel's name, and its block's


def checked_indices(indices: te.Tensor, extents: list, message: str) -> tuple[tirx.PrimFunc, list[tirx.Var]]:
    """A kernel from `indices` to the same indices with negative ones counted from the end of
    their axis, which raises IndexError(`message`) at the first outside [-extent, extent - 1].
    `extents` (int64): of the one axis every index selects along, or of the axes an index
    tuple spans, along the indices' last axis. Returns it and its scalar parameters, passed
    after the indices: the symbolic dims that no dim of the indices' shape gives alone."""

    def extent(i):
        chosen = extents[-1]
        for column in reversed(range(len(extents) - 1)):
            chosen = tirx.Select(i[-1] == column, extents[column], chosen)
        return chosen

    out = te.compute(indices.shape, lambda *i: tirx.Select(indices[i] < 0, indices[i].astype("int64") + extent(i),
                                                           indices[i].astype("int64")).astype(indices.dtype),
                     name=CHECKED_INDICES)
    given = {d for d in indices.shape if isinstance(d, tirx.Var)}  # what the indices' buffer defines
    scalars = list({v: None for e in [*extents, *indices.shape] for v in tirx.analysis.undefined_vars(e)
                    if v not in given})
    func = te.create_prim_func([indices, *scalars, out], "int64")

    def with_check(block: s_tir.SBlock) -> s_tir.SBlock:
        if block.name_hint != CHECKED_INDICES:
            return block
        i = block.body.indices
        index = tirx.BufferLoad(block.reads[0].source, i).astype("int64")  # it reads the indices alone
        # TVM 0.27's `tirx.AssertStmt` passes its kind and condition to the constructor swapped.
        check = tirx._ffi_api.AssertStmt(tirx.all(-extent(i) <= index, index < extent(i)),
                                         tvm.ir.StringImm("IndexError"), [tvm.ir.StringImm(message)], None)
        return s_tir.SBlock(block.iter_vars, block.reads, block.writes, block.name_hint,
                            tirx.SeqStmt([check, block.body]), block.init, block.alloc_buffers, block.match_buffers,
                            block.annotations)

    checked = func.with_body(tvm_ffi.structural_map(func.body, (s_tir.SBlock, with_check)))
    return checked.without_attr("global_symbol"), scalars
