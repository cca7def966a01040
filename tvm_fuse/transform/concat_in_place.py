"""Concats written in place: where a concat's inputs lie back to back in its output (every
dim before the axis is 1, as a channel concat at batch 1 in NCHW or NCHW{c}c), the kernel
that makes each input writes straight into its slice of the concat's buffer, and the concat's
copy is gone. DenseNet concatenates once per layer, SqueezeNet and GoogLeNet once per module.
A concat of concats (DenseNet's growing block) becomes one buffer that every layer writes
its slice of.

Runs on the VM's form of each function (after CallTIRRewrite: a kernel writes into an
`alloc_tensor` passed as its last argument) and before memory planning, which counts a view
as a use of the buffer it views. A concat is left as it is unless it is a plain concat
(`CONCAT_AXIS_ATTR`), each input is a buffer of its own that a kernel of the same block
writes first (as its output: kernels here write only their last argument), and every slice
starts a multiple of `TVM_ALIGNMENT` bytes into the buffer. A slice is a tensor like any other to
the kernels that read it later, and to the caller if it is returned."""

from __future__ import annotations

import math

import tvm
from tvm import relax, tirx
from tvm.relax.op.memory import ensure_zero_offset, view

from ..ir_names import CONCAT_AXIS_ATTR, TVM_ALIGNMENT
from .relax_helpers import static_shape

Slices = dict[relax.Var, tuple[relax.Var, int]]  # alloc -> (buffer it lies in, byte offset)


class _Block:
    """What one binding block allocates, and where a kernel first uses (writes) each buffer."""

    def __init__(self, mod: tvm.IRModule, bindings: list):
        self.mod, self.bindings = mod, bindings
        self.allocs: dict[relax.Var, int] = {}  # alloc var -> its binding's position
        self.alias: dict[relax.Var, relax.Var] = {}
        self.first_use: dict[relax.Var, int] = {}
        alloc_op = tvm.ir.Op.get("relax.builtin.alloc_tensor")
        for pos, binding in enumerate(bindings):
            value = binding.value
            if isinstance(value, relax.Call) and value.op.same_as(alloc_op) and static_shape(binding.var):
                self.allocs[binding.var] = pos
            elif isinstance(value, relax.Var):
                self.alias[binding.var] = self.root(value)
            elif self.kernel(value) is not None:
                for arg in value.args:
                    if isinstance(arg, relax.Var):
                        self.first_use.setdefault(self.root(arg), pos)

    def root(self, var: relax.Var) -> relax.Var:
        return self.alias.get(var, var)

    def kernel(self, value) -> tirx.PrimFunc | None:
        """The PrimFunc of the module that `value` calls, if it calls one."""
        if not (isinstance(value, relax.Call) and isinstance(value.op, relax.GlobalVar)):
            return None
        func = self.mod[value.op]
        return func if isinstance(func, tirx.PrimFunc) else None


def _plan(block: _Block) -> tuple[Slices, set[int]]:
    """The buffers that become slices, and the positions of the concats that go. Outer concats
    first, so that an inner concat's output already knows where it lies."""
    slices: Slices = {}
    removed: set[int] = set()
    for pos in reversed(range(len(block.bindings))):
        value = block.bindings[pos].value
        func = block.kernel(value)
        if func is None or CONCAT_AXIS_ATTR not in (func.attrs or {}):
            continue
        if not all(isinstance(arg, relax.Var) for arg in value.args):
            continue
        *inputs, output = (block.root(arg) for arg in value.args)
        buffer, start = slices.get(output, (output, 0))
        offsets = _offsets(block, inputs, output, int(func.attrs[CONCAT_AXIS_ATTR]), pos, start, slices)
        if offsets is None:
            continue
        for var, offset in zip(inputs, offsets):
            slices[var] = (buffer, offset)
        removed.add(pos)
    return slices, removed


def _offsets(block: _Block, inputs: list, output: relax.Var, axis: int, pos: int, start: int,
             slices: Slices) -> list[int] | None:
    """Each input's byte offset in the buffer `output` lies at `start` bytes into, or None if
    the concat at `pos` must stay."""
    shape = static_shape(output)
    if output not in block.allocs or math.prod(shape[:axis]) != 1 or len(set(inputs)) != len(inputs):
        return None
    for var in inputs:
        if var not in block.allocs or var in slices or block.first_use.get(var, pos) >= pos:
            return None  # not a buffer of its own that a kernel writes before the concat
    dtype = tvm.DataType(output.ty.dtype)
    if any(tvm.DataType(var.ty.dtype) != dtype for var in inputs):
        return None
    inner_bytes = math.prod(shape[axis + 1:]) * dtype.bits // 8
    offsets, offset = [], start
    for var in inputs:
        offsets.append(offset)
        offset += static_shape(var)[axis] * inner_bytes
    # `vm.builtin.ensure_zero_offset` copies a view at an unaligned offset (the writes would miss
    # the buffer), and kernels assume aligned buffers.
    return offsets if all(o % TVM_ALIGNMENT == 0 for o in offsets) else None


def _rewrite(block: _Block, slices: Slices, removed: set[int]) -> list:
    """The block's bindings with each slice a view of its buffer, bound where the slice's
    allocation was; each buffer allocated before the first of its slices."""
    earliest: dict[relax.Var, int] = {}
    for var, (buffer, _) in slices.items():
        earliest[buffer] = min(earliest.get(buffer, block.allocs[buffer]), block.allocs[var])
    hoisted = {pos: buffer for buffer, pos in earliest.items()}
    bindings = []
    for pos, binding in enumerate(block.bindings):
        if pos in hoisted:
            bindings.append(block.bindings[block.allocs[hoisted[pos]]])
        if pos in removed or binding.var in earliest:
            continue
        if binding.var in slices:
            buffer, offset = slices[binding.var]
            ty = binding.var.ty
            sliced = relax.Var(f"{binding.var.name}_slice", ty)
            bindings.append(relax.VarBinding(sliced, view(buffer, ty.shape, ty.dtype, offset)))
            bindings.append(relax.VarBinding(binding.var, ensure_zero_offset(sliced)))
            continue
        bindings.append(binding)
    return bindings


def _in_place(mod: tvm.IRModule, func: relax.Function) -> relax.Function | None:
    body = func.body
    if not isinstance(body, relax.SeqExpr):
        return None
    blocks, changed = [], False
    for binding_block in body.blocks:
        block = _Block(mod, list(binding_block.bindings))
        slices, removed = _plan(block)
        if slices:
            blocks.append(relax.BindingBlock(_rewrite(block, slices, removed)))
            changed = True
        else:
            blocks.append(binding_block)
    if not changed:
        return None
    return relax.Function(func.params, relax.SeqExpr(blocks, body.body), func.ret_ty, func.is_pure,
                          func.attrs, func.span)


def ConcatInPlace() -> tvm.transform.Pass:
    @tvm.transform.module_pass(opt_level=0, name="tvm_fuse.ConcatInPlace")
    def in_place(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        builder = relax.BlockBuilder(mod)
        for gvar, func in mod.functions_items():
            if isinstance(func, relax.Function):
                rewritten = _in_place(mod, func)
                if rewritten is not None:
                    builder.update_func(gvar, rewritten)
        return builder.get()

    return in_place
