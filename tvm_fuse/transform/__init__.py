"""Our passes, one pass per file, in the order `tvm_fuse.pipeline` runs them.

Relax passes over the model's graph:
- canonicalize: `DataflowAroundIfs`, `FoldConstants`, `StackedReductionToBinary`, `RemoveNoOps`, `FoldPadIntoConv`,
  `CanonicalizeDense` (dense.py), `ConvTransposeAsConv`, `FoldBatchNorm`, `ClipToMinMax`,
  `SlopesToMax`, `AlignConstantRanks`, `Conv1dAsDense`, `CancelTransposes`,
  `RecomposeLayerNorm`, `PackProjections`;
- layout: `PadOutputChannels`, `BlockedLayout`, `FoldLayoutChains`, `SinkLayoutTransforms`;
- fuse: `OrderResidualAdds`, `RecordProvenance`, `FusePatterns`, then the precisions'
  `RealizeInt8`, `RealizeBf16` (`realize/`, on their shared analysis of a composite; or
  `ExposeTensors` to calibrate);
- legalize and finalize: `FastMath`, `LowerConcat`, `ConcatInPlace`.

Relax passes that make our kernels (TIR functions in the Relax module) and schedule them:
`LowerComposites`, `FuseAttention`, `LowerMatmuls`, `LowerRowwise`, `ApplySchedules`,
`ScheduleGenericKernels`.

TIR passes of the kernels' lowering (`pipeline.TIR_PIPELINE`): `PeelTileTails`, then after
TVM's lowering `StackLocalBuffers`, `NativeBf16Rounding`, `HoistLlvmImports`,
`SerialSmallKernels`, `PrefetchNextStrip`.

`relax_helpers.py` holds the helpers the Relax passes share.
"""
