"""Constants folded as TVM's FoldConstant folds them, in a fraction of its time.

FoldConstant is slow two ways. It evaluates each op of constants by compiling it to a kernel of
its own, with LLVM, and running it: tens of milliseconds an op. And it legalizes every op call of
the model to TE and TIR (a conv's whole compute) before it looks whether the call's arguments are
constants: 0.2 s a run on Inception-v1, though most runs fold nothing.

So here, data movement of constants is done in numpy: a `layout_transform` (a conv's weight or
bias into the blocked layout) as a reshape and a transpose, and `reshape` and `permute_dims`, also
of what was folded before them. A layout transform whose every output index is an input axis, or
that axis's quotient or remainder by one factor, splits input axes (padded to whole blocks) and
permutes the parts, which numpy does at once. Then each variable bound to a constant is replaced by
the constant where it is read, as FoldConstant does. FoldConstant itself runs only where an op of
constants is left (other transforms, dtypes numpy lacks, arithmetic).
"""

from __future__ import annotations

import numpy as np
import tvm
from tvm import relax, tirx
from tvm.ir.expr import GenericConst
from tvm.relax.expr_functor import PyExprMutator, mutator

from .relax_helpers import is_op, mutate_functions, rebind_pass, static_shape

_FOLDED = ("relax.layout_transform", "relax.reshape", "relax.permute_dims")
_NUMPY_DTYPES = ("float32", "float16", "float64", "int8", "uint8", "int16", "int32", "int64")


def FoldConstants() -> tvm.transform.Pass:
    in_numpy = rebind_pass("tvm_fuse.FoldConstantLayouts", _plan)

    @tvm.transform.module_pass(opt_level=0, name="tvm_fuse.FoldConstants")
    def fold(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        mod = _inline_constants(in_numpy(mod))
        if not _has_op_of_constants(mod):
            return mod
        # FoldConstant legalizes each call before it looks at its arguments, and a legalization
        # that emits bindings of its own (dynamic_strided_slice's shape function) leaves them
        # behind, calling a function it never adds: such a module is not folded.
        folded = relax.transform.FoldConstant()(mod)
        return folded if _calls_defined(folded) else mod

    return fold


def _calls_defined(mod: tvm.IRModule) -> bool:
    """Whether every function the Relax functions of `mod` call is in `mod`."""
    return all(gvar in mod.functions for func in mod.functions.values() if isinstance(func, relax.Function)
               for gvar in relax.analysis.all_global_vars(func))


def _parts(index_map, rank: int) -> list[tuple[int, str, int]] | None:
    """Each output index as (input axis, "whole" / "outer" / "inner", block), or (-1, "zero", 1)
    for a constant 0 (a new axis of one), or None where one is not of those forms or an axis is
    not split the one way."""
    variables = list(index_map.initial_indices)

    def axis_of(expr) -> int | None:
        return next((axis for axis, v in enumerate(variables) if v.same_as(expr)), None)

    parts = []
    for index in index_map.final_indices:
        if axis_of(index) is not None:
            parts.append((axis_of(index), "whole", 1))
        elif isinstance(index, tirx.IntImm) and int(index) == 0:
            parts.append((-1, "zero", 1))
        elif (isinstance(index, (tirx.FloorDiv, tirx.FloorMod)) and axis_of(index.a) is not None
              and isinstance(index.b, tirx.IntImm) and int(index.b) > 0):
            parts.append((axis_of(index.a), "outer" if isinstance(index, tirx.FloorDiv) else "inner", int(index.b)))
        else:
            return None
    for axis in range(rank):
        kinds = sorted((kind, block) for a, kind, block in parts if a == axis)
        if kinds != [("whole", 1)] and [kind for kind, _ in kinds] != ["inner", "outer"] or len({b for _, b in kinds}) != 1:
            return None
    return parts


def folded(call: relax.Call, array: np.ndarray) -> np.ndarray | None:
    """The value of `call` (a `layout_transform`, `reshape` or `permute_dims`) of `array` as
    numpy computes it, or None (left to TVM)."""
    out_shape = static_shape(call)
    if out_shape is None:
        return None
    if is_op(call, "relax.reshape"):
        return array.reshape(out_shape)
    if is_op(call, "relax.permute_dims"):
        axes = call.attrs.axes
        return np.ascontiguousarray(array.transpose(None if axes is None else [int(a) for a in axes]))
    parts = _parts(call.attrs.index_map, array.ndim)
    if parts is None:
        return None
    blocks = {axis: block for axis, kind, block in parts if kind in ("outer", "inner")}
    pad_value = call.attrs.pad_value
    padding = [(0, -extent % blocks.get(axis, 1)) for axis, extent in enumerate(array.shape)]
    array = np.pad(array, padding, constant_values=0 if pad_value is None else pad_value.value)
    split, position = [], {}
    for axis, extent in enumerate(array.shape):
        if axis in blocks:
            position[(axis, "outer")], position[(axis, "inner")] = len(split), len(split) + 1
            split += [extent // blocks[axis], blocks[axis]]
        else:
            position[(axis, "whole")] = len(split)
            split.append(extent)
    result = array.reshape(split).transpose([position[(axis, kind)] for axis, kind, _ in parts if kind != "zero"])
    result = np.expand_dims(result, [index for index, (_, kind, _) in enumerate(parts) if kind == "zero"])
    return np.ascontiguousarray(result) if list(result.shape) == out_shape else None


def _plan(func: relax.Function) -> dict[relax.Var, relax.Expr]:
    plan, known = {}, {}  # known: the values of variables bound to constants, or folded here
    constants = _constant_bindings(func)
    for block in func.body.blocks:
        for binding in block.bindings:
            value = binding.value
            if not isinstance(binding, relax.VarBinding) or not any(is_op(value, op) for op in _FOLDED):
                continue
            source = constants.get(value.args[0], value.args[0])
            if isinstance(source, GenericConst) and str(source.ty.dtype) in _NUMPY_DTYPES:
                array = source.value.numpy()
            elif isinstance(source, relax.Var) and source in known:
                array = known[source]
            else:
                continue
            array = folded(value, array)
            if array is not None:
                known[binding.var] = array
                plan[binding.var] = relax.const(array, str(value.ty.dtype))
    return plan


def _constant_bindings(func: relax.Function) -> dict[relax.Var, GenericConst]:
    return {binding.var: binding.value for block in func.body.blocks for binding in block.bindings
            if isinstance(binding, relax.VarBinding) and isinstance(binding.value, GenericConst)}


@mutator
class _ConstantInliner(PyExprMutator):
    """Reads of variables bound to constants read the constants; those bindings go."""

    def __init__(self, mod: tvm.IRModule):
        super().__init__(mod)
        self.constants: dict[relax.Var, GenericConst] = {}

    def visit_var_(self, var: relax.Var) -> relax.Expr:
        return self.constants.get(var, var)

    def visit_dataflow_var_(self, var: relax.DataflowVar) -> relax.Expr:
        return self.constants.get(var, var)

    def visit_var_binding_(self, binding: relax.VarBinding) -> None:
        if binding.var not in self.constants:
            super().visit_var_binding_(binding)


def _inline_constants(mod: tvm.IRModule) -> tvm.IRModule:
    inliner = _ConstantInliner(mod)

    def inline(func: relax.Function) -> relax.Function | None:
        inliner.constants = _constant_bindings(func)
        return inliner.visit_expr(func) if inliner.constants else None

    return mutate_functions(mod, inliner, inline)


def _has_op_of_constants(mod: tvm.IRModule) -> bool:
    """Whether a call of an op has constants for all its tensor arguments (within tuples too)."""
    def tensors(args):
        for arg in args:
            if isinstance(arg, relax.Tuple):
                yield from tensors(arg.fields)
            elif isinstance(arg, relax.Var) or isinstance(getattr(arg, "ty", None), relax.TensorType):
                yield arg

    found = []

    def visit(expr) -> None:
        if isinstance(expr, relax.Call) and isinstance(expr.op, tvm.ir.Op):
            args = list(tensors(expr.args))
            if args and all(isinstance(arg, GenericConst) for arg in args):
                found.append(expr)

    for func in mod.functions.values():
        if isinstance(func, relax.Function) and not found:
            relax.analysis.post_order_visit(func.body, visit)
    return bool(found)
