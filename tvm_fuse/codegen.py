"""A finalized Relax module to a VM executable, its kernels compiled on every core.

`tvm.compile` lowers and compiles all of a model's kernels as one module on one thread: after
the fixes of build time, TIR lowering and LLVM's code generation were the largest part of a
build (DenseNet-121: 5 of 10 s). Kernels are independent functions, and TVM's compiler runs
without Python's lock, so here they are split into one module per core, compiled by threads at
once, and the modules joined by importing them into the first (the VM finds a kernel in any
module its library imports; `export` writes them all). The rest is TVM's own VM code
generation and link (`relax.vm_build`), for a CPU target without external libraries.

`weights_apart` makes the model's weights parameters of its `main` instead of constants of the
executable: the VM then copies none of them when a library loads (an exported model's weights
are a file of their own, mapped, `artifact`), and the library holds only code. Constants of
equal contents become one parameter, as the VM's constant pool kept them once.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import tvm
import tvm_ffi
from tvm import relax, tirx
from tvm.ir.expr import GenericConst
from tvm.relax import _ffi_api as relax_ffi
from tvm.relax.expr_functor import PyExprMutator, mutator

from .ir_names import UNPEELED_ATTR
from .target import host_cores


def llvm_modules(module: tvm.runtime.Module) -> list[tvm.runtime.Module]:
    """The LLVM modules of `module` and of the modules it imports, at any depth: an
    executable's kernels, one module per core that compiled them."""
    found = [module] if module.kind == "llvm" else []
    return found + [m for imported in module.imports for m in llvm_modules(imported)]


def pass_context_like(outer: tvm.transform.PassContext, config: dict | None = None) -> tvm.transform.PassContext:
    """A PassContext with `outer`'s settings and `config` added: for a pass that needs more
    configuration, and for a thread (TVM keeps the current context per thread)."""
    return tvm.transform.PassContext(opt_level=outer.opt_level, required_pass=outer.required_pass,
                                     disabled_pass=outer.disabled_pass, instruments=outer.instruments,
                                     config={**outer.config, **(config or {})})


def _kernel_modules(mod: tvm.IRModule, parts: int) -> list[tvm.IRModule]:
    """`mod`'s kernels (its PrimFuncs) in up to `parts` modules, dealt out in turn."""
    kernels = sorted(((gvar, f) for gvar, f in mod.functions.items() if isinstance(f, tirx.PrimFunc)),
                     key=lambda item: item[0].name_hint)
    groups = [kernels[i::parts] for i in range(parts)]
    return [tvm.IRModule(dict(group), attrs=mod.attrs) for group in groups if group]


@mutator
class _ConstantsToParameters(PyExprMutator):
    """Each constant tensor (not a scalar) to a variable, in `parameters`, one for all the
    constants of the same contents: a weight that several calls read, each through its own copy
    (an unrolled LSTM's per step, each packed for its kernel), is then one tensor in memory, as
    TVM's VM made it of equal constants."""

    def __init__(self):
        super().__init__()
        self.parameters: dict[relax.Var, tvm.runtime.Tensor] = {}
        self._lifted: dict[GenericConst, relax.Var] = {}
        self._by_contents: dict[int, list[relax.Var]] = {}

    def visit_generic_const_(self, constant: GenericConst) -> relax.Expr:
        if not isinstance(constant.ty, relax.TensorType) or constant.ty.ndim == 0:
            return constant
        if constant not in self._lifted:
            self._lifted[constant] = self._parameter(constant.value, constant.ty)
        return self._lifted[constant]

    def _parameter(self, value: tvm.runtime.Tensor, ty) -> relax.Var:
        same = self._by_contents.setdefault(tvm_ffi.structural_hash(value), [])
        for var in same:
            if tvm_ffi.structural_equal(self.parameters[var], value):
                return var
        var = relax.Var(f"weight{len(self.parameters)}", ty)
        self.parameters[var] = value
        same.append(var)
        return var


def weights_apart(mod: tvm.IRModule) -> tuple[tvm.IRModule, list[tvm.runtime.Tensor]]:
    """`mod` (finalized) with the constant tensors of its `main` as trailing parameters of
    `main`, and those tensors: `main(*inputs, *weights)` computes what `main(*inputs)` did."""
    main = mod["main"]
    lift = _ConstantsToParameters()
    body = lift.visit_expr(main.body)
    updated = mod.clone()
    updated["main"] = relax.Function([*main.params, *lift.parameters], body, main.ret_ty,
                                     main.is_pure, main.attrs, main.span)
    return updated, list(lift.parameters.values())


def _built_alone(kernel: tvm.IRModule, target: tvm.target.Target, tir_pipeline: str) -> tvm.runtime.Module:
    """A module of one kernel compiled; unpeeled (`UNPEELED_ATTR`) if TVM fails to compile it
    peeled (its loop partition mixes int32 and int64 on some int64-indexed kernels: a reflect Pad
    of a long row, a Flatten of a symbolic batch), its guarded stores then scalar."""
    try:
        return tvm.tirx.build(kernel, target=target, pipeline=tir_pipeline)
    except (TypeError, tvm.error.InternalError):
        (gvar, func), = kernel.functions.items()
        unpeeled = tvm.IRModule({gvar: func.with_attr(UNPEELED_ATTR, True)}, attrs=kernel.attrs)
        return tvm.tirx.build(unpeeled, target=target, pipeline=tir_pipeline)


def executable(mod: tvm.IRModule, target: tvm.target.Target, tir_pipeline: str) -> relax.VMExecutable:
    """The VM executable of `mod` (a Relax module after the finalize passes), its kernels lowered
    by `tir_pipeline` and compiled in parallel."""
    attrs = dict(mod.attrs) if mod.attrs else {}
    if attrs.get("external_mods"):
        raise ValueError("external modules are not supported here")
    constants = dict(attrs.get("const_name_to_constant", {}))
    builder = relax.ExecBuilder()
    leftover = relax_ffi.VMCodeGen(builder, mod)
    parts = _kernel_modules(leftover, host_cores())
    outer = tvm.transform.PassContext.current()

    def build(part: tvm.IRModule) -> list[tvm.runtime.Module]:
        with pass_context_like(outer):  # the caller's settings, in this thread too
            try:
                return [tvm.tirx.build(part, target=target, pipeline=tir_pipeline)]
            except (TypeError, tvm.error.InternalError):  # a kernel TVM fails to compile peeled
                return [_built_alone(tvm.IRModule({gvar: func}, attrs=part.attrs), target, tir_pipeline)
                        for gvar, func in part.functions.items()]

    with ThreadPoolExecutor(max_workers=len(parts) or 1) as pool:
        libraries = [library for built in pool.map(build, parts) for library in built]
    library = libraries[0] if libraries else None
    for other in libraries[1:]:
        library.import_module(other)
    return relax.VMExecutable(relax_ffi.VMLink(builder, target, library, [], constants))
