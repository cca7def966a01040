"""The compilation pipeline, phase by phase, top to bottom.

Each phase is a function returning named TVM passes, so `PassContext(disabled_pass=[...])`
can switch any one off (e.g. `tvm_fuse.FusePatterns`). `optimize` runs `canonicalize`,
`layout`, `fuse`, then `kernels` (our kernels' schedules, with knobs from the tuning logs where
they have a record): the fused graph the fusion report reads; `legalize` lowers the other ops to kernels;
`finalize` turns that into what the VM runs, and `compile_lowered` compiles it, its kernels
lowered by `TIR_PIPELINE` (`compile_weights_apart`: the weights left out of the executable).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

import onnx
import tvm
from tvm import relax, tirx
from tvm.relax.backend.cpu_generic import pipeline as cpu_generic

from .build_timings import phase
from .codegen import executable, pass_context_like, weights_apart
from .frontend.importer import graph_functions
from .frontend.support import check_lowered, check_unlowered
from .patterns.table import ATTENTION_FAMILY
from .target import isa_features, vector_lanes
from .transform.align_constant_ranks import AlignConstantRanks
from .transform.apply_schedules import ApplySchedules
from .transform.blocked_layout import BlockedLayout
from .transform.blocked_resize import BlockedResize
from .transform.blocked_splits import BlockedSplits
from .transform.cancel_transposes import CancelTransposes
from .transform.clip_to_min_max import ClipToMinMax
from .transform.concat_in_place import ConcatInPlace
from .transform.conv1d_as_dense import Conv1dAsDense
from .transform.conv3d_as_conv2d import Conv3dAsConv2d
from .transform.conv_transpose_as_conv import ConvTransposeAsConv
from .transform.dataflow_around_ifs import DataflowAroundIfs
from .transform.dense import CanonicalizeDense
from .transform.fast_math import FastMath
from .transform.fold_batch_norm import FoldBatchNorm
from .transform.fold_constants import FoldConstants
from .transform.fold_layout_chains import FoldLayoutChains
from .transform.fold_pad_into_conv import FoldPadIntoConv
from .transform.fuse_attention import FuseAttention, bf16_products
from .transform.fuse_patterns import FusePatterns
from .transform.hoist_llvm_imports import HoistLlvmImports
from .transform.lower_composites import LowerComposites
from .transform.lower_concat import LowerConcat
from .transform.lower_matmuls import LowerMatmuls
from .transform.lower_rowwise import LowerRowwise
from .transform.native_bf16_rounding import NativeBf16Rounding
from .transform.order_residual_adds import OrderResidualAdds
from .transform.pack_projections import PackProjections
from .transform.pad_output_channels import PadOutputChannels
from .transform.peel_tile_tails import PEELING_CONFIG, PeelTileTails
from .transform.prefetch_next_strip import PrefetchNextStrip
from .transform.realize.integer_products import realize_integer_products
from .transform.recompose_layer_norm import RecomposeLayerNorm
from .transform.record_provenance import RecordProvenance
from .transform.remove_noops import RemoveNoOps
from .transform.schedule_generic_kernels import ScheduleGenericKernels
from .transform.serial_small_kernels import SerialSmallKernels
from .transform.sink_layout_transforms import SinkLayoutTransforms
from .transform.slopes_to_max import SlopesToMax
from .transform.stack_local_buffers import StackLocalBuffers
from .transform.stacked_reduction_to_binary import StackedReductionToBinary
from .transform.symbolic_reshapes import SymbolicReshapesAsViews
from .tuning.database import TuningDatabase


def canonicalize(target: tvm.target.Target, disabled: Collection[str]) -> list[tvm.transform.Pass]:
    """The forms the fusion table expects: the ops around an If in dataflow blocks, constants
    folded first (a conv bias is a reshape of one until then), ONNX Sum / Max / Min / Mean as
    binary ops, no-ops gone, a conv's zero Pad as its own padding, Gemm / MatMul + Add as dense
    + bias, a transposed conv whose kernel is its stride as a 1x1 conv, a 3-D conv one frame
    deep as a 2-D conv of each frame, batch-norm folded into the layer before it (unless
    `conv_bn` / `fc_bn` are off), clip as maximum / minimum, leaky ReLU and PRelu as a maximum
    and constants at their tensor's rank (all so layout conversion can follow), a 1-D conv with
    an output row shorter than a vector (or strided or grouped over enough channels) as a dense
    layer over its input windows (one output over its whole input: over the input itself), a
    transpose undone after elementwise ops gone, a layer norm written out op by op as one, and
    an attention block's Q, K and V projections as one dense layer (unless `attention` is off)."""
    fold_into = [family for family in ("conv", "fc") if f"{family}_bn" not in disabled]
    return [
        DataflowAroundIfs(),
        FoldConstants(),
        StackedReductionToBinary(),
        RemoveNoOps(),
        FoldPadIntoConv(),
        CanonicalizeDense(),
        ConvTransposeAsConv(),
        Conv3dAsConv2d(),
        FoldBatchNorm(fold_into),
        ClipToMinMax(),
        SlopesToMax(),
        AlignConstantRanks(),
        Conv1dAsDense(vector_lanes(target)),
        CancelTransposes(),
        FoldBatchNorm(fold_into),  # again: a batch norm written out on NHWC now follows its conv
        RecomposeLayerNorm(),
        relax.transform.DecomposeOpsForInference(),  # what FoldBatchNorm leaves: training-mode ones
        *([] if ATTENTION_FAMILY in disabled else [PackProjections()]),
        FoldConstants(),
    ]


def layout(target: tvm.target.Target, bf16: bool = False) -> list[tvm.transform.Pass]:
    """Conv chains in NCHW{c}c, c the fp32 vector width (in a `bf16` build for AMX-BF16, twice
    it where the convs' channels allow: an AMX conv's tile row), channel splits and concats of
    whole blocks and resizes between blocked tensors kept in it; weights repacked at build
    time, in numpy where a reshape and a transpose do it."""
    lanes = vector_lanes(target)
    wide = 2 * lanes if bf16 and "amx_bf16" in isa_features(target) else None
    return [PadOutputChannels(lanes), BlockedLayout(lanes, wide), BlockedSplits(), BlockedResize(), FoldLayoutChains(),
            SinkLayoutTransforms(), FoldConstants()]


def fuse(target: tvm.target.Target, disabled: Collection[str],
         realize: Sequence[tvm.transform.Pass] = (), bf16: bool = False) -> list[tvm.transform.Pass]:
    """Matches of the fusion table become composite functions, then one kernel each, and each
    attention block one kernel (unless its family is disabled); the `realize` passes
    (`RealizeInt8`, or `ExposeTensors` to calibrate; `RealizeBf16`) see the composites first and
    turn those they take into kernels of their precision. `bf16`: a bf16 build, whose attention
    kernels multiply in bf16 too."""
    return [
        OrderResidualAdds(),
        RecordProvenance(),
        FusePatterns(disabled),
        realize_integer_products(target),
        *realize,
        LowerComposites(vector_lanes(target)),
        *([] if ATTENTION_FAMILY in disabled else [FuseAttention(vector_lanes(target), bf16_products(target)
                                                                 if bf16 else None)]),
        LowerMatmuls(),  # the products left unfused (an attention of another form's) as our kernel too
        LowerRowwise(vector_lanes(target)),  # layer norms and softmaxes, vectorized
    ]


def kernels(target: tvm.target.Target, tuning: TuningDatabase | None) -> list[tvm.transform.Pass]:
    """Our kernels scheduled for the target's vector ISA, with tuned knobs where `tuning` has them."""
    return [ApplySchedules(target, tuning)]


def legalize(target: tvm.target.Target) -> list[tvm.transform.Pass]:
    """The remaining Relax ops to TIR kernels, but reshapes of symbolic shape, which become
    views; TVM's generic fusion groups the elementwise ones (our kernels are opaque to it).
    After this, every kernel the model runs is a call."""
    return ([FastMath, LowerConcat(), SymbolicReshapesAsViews()] + cpu_generic.library_dispatch_passes(target)
            + cpu_generic.legalize_passes(target) + [ScheduleGenericKernels(target)])


def finalize(target: tvm.target.Target) -> list[tvm.transform.Pass]:
    """What the VM executes: TVM's CPU backend (memory planning, VM calls), with concats
    written in place before the memory is planned."""
    return cpu_generic.dataflow_lower_passes(target) + [ConcatInPlace()] + cpu_generic.finalize_passes(target)


TIR_PIPELINE = "tvm_fuse"  # `tvm.compile(..., tir_pipeline=TIR_PIPELINE)` for a kernel of ours


def _tir_pipeline():
    """TVM's TIR lowering after `PeelTileTails` (with its `PEELING_CONFIG`), and
    `StackLocalBuffers`, `NativeBf16Rounding`, `HoistLlvmImports`, `SerialSmallKernels` and
    `PrefetchNextStrip` before the host's LowerTVMBuiltin."""
    lower, finalize_host, finalize_device = tirx.get_tir_pipeline("s_tir")

    @tvm.transform.module_pass(opt_level=0, name="tvm_fuse.lower")
    def peeled_lower(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        with pass_context_like(tvm.transform.PassContext.current(), PEELING_CONFIG):
            return lower(PeelTileTails()(mod))

    host = [StackLocalBuffers(), NativeBf16Rounding(), HoistLlvmImports(), SerialSmallKernels(), PrefetchNextStrip()]
    return peeled_lower, lambda: tvm.transform.Sequential([*host, finalize_host()]), finalize_device


tirx.register_tir_pipeline(TIR_PIPELINE, _tir_pipeline)

# TVM gives nearbyint (ONNX Round's, and every quantize's rounding) no vector form, so its
# vectorizer scalarized each loop that calls it, which LLVM then vectorized with gathers and
# scatters (5.6x slower); LLVM lowers the vector call to one `vrndscaleps`.
if tvm.ir.Op.get("tirx.nearbyint").get_attr("TVectorizable") is None:
    tvm.ir.register_op_attr("tirx.nearbyint", "TVectorizable", True)


def _in_target(name: str, passes: list[tvm.transform.Pass], target: tvm.target.Target) -> tvm.transform.Pass:
    sequential = tvm.transform.Sequential(passes, name=name)

    @tvm.transform.module_pass(opt_level=0, name=name)
    def run_in_target(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        with target:  # legalization reads the target from the context
            return sequential(mod)

    return run_in_target


def optimize(mod: tvm.IRModule, target: tvm.target.Target, disabled: Collection[str] = (),
             tuning: TuningDatabase | None = None, int8: tvm.transform.Pass | None = None,
             bf16: tvm.transform.Pass | None = None) -> tvm.IRModule:
    """Run `canonicalize`, `layout` and `fuse` (`int8`, then `bf16`, go to `fuse`; a `bf16` build's
    `layout` may take wider blocks), then `kernels`: the fused, scheduled graph the fusion
    report reads."""
    realize = [p for p in (int8, bf16) if p is not None]
    phases = {"canonicalize": canonicalize(target, disabled), "layout": layout(target, bf16 is not None),
              "fuse": fuse(target, disabled, realize, bf16 is not None), "schedule kernels": kernels(target, tuning)}
    for name, passes in phases.items():
        with phase(name):
            mod = _in_target("tvm_fuse.optimize", passes, target)(mod)
    return mod


def lowered(mod: tvm.IRModule, target: tvm.target.Target, model: onnx.ModelProto | None = None) -> tvm.IRModule:
    """`mod` after `legalize`: one call per kernel run. With the ONNX `model` it was imported
    from, an op TVM cannot legalize (shapes unknown at build time) refuses its nodes by name
    (`frontend.support.check_lowered`, `check_unlowered`)."""
    with phase("legalize"):
        try:
            legal = _in_target("tvm_fuse.legalize", legalize(target), target)(mod)
        except Exception:
            if model is not None:
                check_unlowered(model, graph_functions(mod))
            raise
    if model is not None:
        check_lowered(model, graph_functions(legal))
    return legal


def compile_lowered(mod: tvm.IRModule, target: tvm.target.Target) -> tvm.relax.VMExecutable:
    """The VM executable of `lowered(mod)`: `finalize`, then every kernel to machine code, the
    kernels on every core (`codegen.executable`)."""
    finalized = _finalized(mod, target)
    with phase("code generation"):
        return executable(finalized, target, TIR_PIPELINE)


def compile_weights_apart(mod: tvm.IRModule, target: tvm.target.Target) -> tuple[tvm.relax.VMExecutable, list]:
    """`compile_lowered`, with the model's weights as trailing parameters of its `main`
    (`codegen.weights_apart`), returned beside the executable."""
    finalized, weights = weights_apart(_finalized(mod, target))
    with phase("code generation"):
        return executable(finalized, target, TIR_PIPELINE), weights


def _finalized(mod: tvm.IRModule, target: tvm.target.Target) -> tvm.IRModule:
    with phase("Relax finalize"):
        return _in_target("tvm_fuse.finalize", finalize(target), target)(mod)
