"""Run conv kernels in int8 where a calibration table gives their tensors a scale.

Each such kernel (a composite of the fusion table, `quantization.points`) becomes ONE int8
kernel: u8 data times s8 weights (per output channel, quantized and packed here, at build
time) accumulated in s32, then in the epilogue, on the register tile: the accumulator scaled
to real values, the composite's own post-ops (bias, scale/shift, activation, residual add,
with a u8 residual dequantized on the fly), and the result quantized back to u8. So a chain
of int8 kernels passes u8 tensors along, and nothing dequantizes between them.

Dense layers with few rows (a CNN's classifier at small batch) keep fp32 data and arithmetic
but read s8 weights, with a scale per output column: fp32 weights made them bound by reading
their weights. Dense layers with more rows whose input has a calibrated scale run in int8
(`compute.dense_int8`), their input quantized once on that scale. Without a table
(`QuantConfig(activations="dynamic")`), every dense layer runs in int8 on its input quantized
at run time, a scale per group of 64 values of a row (`compute.dense_int8_groups`; each input
quantized once, however many layers read it), and convs stay fp32.

A pre-quantized (QDQ) model's table comes from its pairs (`frontend.qdq`), which stand for
rounding: its dense layers run in int8 however few their rows, and a kernel left in fp32 reads
such a tensor rounded to its pair's grid (`requantize.on_grid`), as the model computes.

A kernel's output stays u8 only when every reader is an int8 kernel; otherwise it writes
fp32 (a model output, a pooling or another op reads it). A depthwise conv (computed in fp32:
it is bound by memory, not arithmetic) that only int8 kernels read writes u8 codes from its
epilogue. Any other fp32 tensor an int8 kernel reads is quantized once by a kernel of its own.
"""

from __future__ import annotations

from collections.abc import Collection

import numpy as np
import onnx
import tvm
from tvm import relax, te
from tvm.relax.expr_functor import PyExprMutator, mutator

from ...amx import fits_amx
from ...calibration_table import CalibrationTable, TensorScale
from ...compute import requantize
from ...compute.conv import fold_row_taps
from ...compute.conv_nchwc_int8 import OUT_BLOCK, QUAD, conv2d_nchwc_int8
from ...compute.dense_int8 import (
    dense_int8,
    dense_int8_groups,
    dequantize_product,
    fits_amx_groups,
    pack_dense_quads,
    quantize_rows,
    row_groups,
)
from ...compute.matmul import dense_packed, pack_dense_weight, packing_block
from ...frontend import ImportedModel
from ...frontend.qdq import METHOD as QDQ_METHOD
from ...ir_names import KERNEL_ATTR, OP_PATTERN_ATTR, OPAQUE
from ...patterns.table import composite_of
from ...quantization.config import QuantConfig
from ...quantization.points import (
    MAX_WEIGHT_BOUND_ROWS,
    QuantizableConv,
    dense_input,
    quantizable_convs,
    row_quantized_denses,
    tensor_names,
    weight_bound_denses,
)
from ...quantization.weights import S7_MAX, S8_MAX, pack_vnni, quantize_blocked_weight, quantize_dense_weight
from ...target import isa_features, vector_lanes
from ..lower_composites import anchor_compute, composite_compute, kernel_call
from ..relax_helpers import blocked_from_nchw, mutate_functions, read_only_by, readers, rebind
from .composite import TileLayout, anchor_of, conv_tile_layout, largest_set

INT8_ATTR = "tvm_fuse.int8"  # kernel attribute: its data and weights are int8
_U8_POOLS = {"relax.nn.max_pool2d"}


def RealizeInt8(model: onnx.ModelProto, table: CalibrationTable | None, vnni: bool, per_channel: bool = True,
                exclude: Collection[str] = (), lanes: int = 16, amx: bool = False) -> tvm.transform.Pass:
    """`table`: the calibrated scales, or None to quantize dense inputs at run time.
    `vnni`: the target has `vpdpbusd`; without it weights keep 7 bits (`quantization.weights`).
    `exclude`: node names or op types left fp32, besides the table's own. `lanes`: the
    target's fp32 vector width. `amx`: the target has AMX-INT8, on whose tiles (`tdpbusd`)
    the convs and dense layers that fit them run."""

    @tvm.transform.module_pass(opt_level=0, name="tvm_fuse.RealizeInt8")
    def realize(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        names = tensor_names(mod, model)
        excluded = {*(table.exclude if table else ()), *exclude}
        convs = [] if table is None else [c for c in quantizable_convs(mod, model, names, excluded)
                                          if all(n in table.tensors for n in (c.data, c.residual) if n)]
        # Without a table every dense layer quantizes its rows, few or many: at 16 rows (MiniLM at
        # 16 tokens) 1.9x faster than fp32 math on s8 weights. A QDQ model's dense layers round
        # their input to its pair's grid, as the model computes, however few their rows.
        every_row = table is None or _from_qdq(table)
        denses = [] if every_row else weight_bound_denses(mod, model, excluded)
        rows = row_quantized_denses(mod, model, excluded, min_rows=1 if every_row else MAX_WEIGHT_BOUND_ROWS + 1)
        if table is not None:  # calibrated: the denses whose input has a scale
            values = {b.var: b.value for block in mod["main"].body.blocks for b in block.bindings}
            rows = [v for v in rows if names.get(dense_input(mod, values[v])) in table.tensors]
        if not convs and not denses and not rows:
            return mod
        realizer = _Realizer(mod, convs, denses, rows, table, names, vnni, per_channel, lanes, amx)
        main = mod.get_global_var("main")
        updated = mutate_functions(mod, realizer, lambda f: realizer.visit_expr(f) if f.same_as(mod[main]) else None)
        return relax.transform.DeadCodeElimination()(updated)

    return realize


def _from_qdq(table: CalibrationTable) -> bool:
    """Whether `table` holds a pre-quantized model's pairs, which stand for its rounding."""
    return table.method == QDQ_METHOD


def realize_int8(imported: ImportedModel, config: QuantConfig | None,
                 target: tvm.target.Target) -> tvm.transform.Pass | None:
    """The `RealizeInt8` pass of a `calibrated` config (None: an fp32 build)."""
    if config is None:
        return None
    features = isa_features(target)
    return RealizeInt8(imported.onnx, config.calibration, "avx512_vnni" in features, config.per_channel,
                       config.exclude, vector_lanes(target), amx="amx" in features)


@mutator
class _Realizer(PyExprMutator):
    def __init__(self, mod: tvm.IRModule, convs: list[QuantizableConv], denses: list[relax.Var],
                 rows: list[relax.Var], table: CalibrationTable | None, names: dict[relax.Var, str], vnni: bool,
                 per_channel: bool, lanes: int, amx: bool):
        super().__init__(mod)
        self.mod = mod
        self.convs = {c.var: c for c in convs}
        self.denses = set(denses)
        self.row_quantized = set(rows)
        self.values = {b.var: b.value for block in mod["main"].body.blocks for b in block.bindings}
        self.codes = _u8_plan(mod, self.values, self.convs, table, names) if convs else {}
        self.table = table
        self.names = names
        self.vnni = vnni
        self.per_channel = per_channel
        self.lanes = lanes
        self.amx = amx
        self.quantized: dict[relax.Var, relax.Var] = {}  # fp32 tensor -> its u8 copy
        self.qdq = table is not None and _from_qdq(table)
        self.rounded: dict[relax.Var, relax.Var] = {}  # fp32 tensor of a QDQ pair -> its values on the grid
        self.row_codes: dict[relax.Var, tuple[relax.Var, relax.Var]] = {}  # fp32 tensor -> (codes, row params)

    def visit_var_binding_(self, binding: relax.VarBinding) -> None:
        if binding.var in self.codes and binding.var not in self.convs:
            if _depthwise(self.mod, binding.value):
                return self._quantized_depthwise(binding)
            return self._pass_codes(binding)
        if binding.var in self.denses:
            return self._s8_weight_dense(binding)
        if binding.var in self.row_quantized:
            return self._row_quantized_dense(binding)
        conv = self.convs.get(binding.var)
        if conv is None:
            if self.qdq and isinstance(binding.value, relax.Call):
                return rebind(self, binding, self._on_grids(binding.value))
            return super().visit_var_binding_(binding)
        call = binding.value
        func = self.mod[call.op]
        params = list(func.params)
        found = anchor_of(func)
        anchor, data_position, weight_position = found.call, found.data, found.weight
        args = [self.visit_expr(a) for a in call.args]
        data_scale = self.codes.get(call.args[data_position]) or self.table.tensors[conv.data]
        args[data_position] = self._u8(call.args[data_position], args[data_position], data_scale)
        data_block, kernel_w = int(args[data_position].ty.shape[-1]), int(args[weight_position].ty.shape[3])
        layout = conv_tile_layout(found, data_block, 1, int(args[data_position].ty.shape[1]),
                                  args[weight_position].ty, self.amx)
        tiles, layout = layout is not None, layout or TileLayout()
        weight, multiplier, correction = self._weights(args[weight_position].value.numpy(), data_scale, data_block,
                                                       layout.arrange)
        args[weight_position] = relax.const(weight)
        residual = None
        if conv.residual:  # the one operand neither data nor constant
            operand = next(a for i, a in enumerate(call.args) if i != data_position and isinstance(a, relax.Var))
            residual = self.codes.get(operand) or self.table.tensors[conv.residual]
        output = self.codes.get(binding.var)
        compute = _int8_compute(func, params, anchor, data_scale.zero_point, residual is not None, output,
                                self.vnni, tiles, kernel_w if layout.fold else 0)
        scales = relax.const(_epilogue_scales(residual, output))
        rebind(self, binding, kernel_call(self.builder_, func, compute,
                                          [*args, scales, relax.const(multiplier), *correction],
                                          "int8_", {INT8_ATTR: True}))

    def _s8_weight_dense(self, binding: relax.VarBinding) -> None:
        """A dense kernel reading s8 weights, packed in blocks of output columns
        (`packing_block`), scaled back per column before the post-ops."""
        call = binding.value
        func = self.mod[call.op]
        params = list(func.params)
        position = anchor_of(func).weight
        args = [self.visit_expr(a) for a in call.args]
        codes, scale = quantize_dense_weight(args[position].value.numpy(), self.per_channel)
        args[position] = relax.const(pack_dense_weight(codes, packing_block(codes.shape[1], OUT_BLOCK)))

        def compute(*tensors):
            def anchor(_call, data, weight):
                return requantize.dequantize_columns(dense_packed(data, weight), tensors[-1])

            return composite_compute(func.body, params, anchor)(*tensors[:-1])

        rebind(self, binding, kernel_call(self.builder_, func, compute, [*args, relax.const(scale)], "s8_weights_"))

    def _row_quantized_dense(self, binding: relax.VarBinding) -> None:
        """An int8 dense kernel (`compute.dense_int8`) on its input's rows quantized at run time,
        or on the calibrated scale of its input."""
        call = binding.value
        func = self.mod[call.op]
        params = list(func.params)
        found = anchor_of(func)
        data, weight = found.data, found.weight
        args = [self.visit_expr(a) for a in call.args]
        codes, scale = quantize_dense_weight(args[weight].value.numpy(), self.per_channel,
                                             S8_MAX if self.vnni or self.amx else S7_MAX)
        block = packing_block(codes.shape[1], self.lanes)
        if self.table is None:  # each row in groups, each group on its own range
            tiles = self.amx and fits_amx_groups(codes.shape[0], block)
            args[data], row_params = self._rows_as_codes(call.args[data], args[data], flat=tiles)
            groups, size = row_groups(codes.shape[0])
            codes = np.pad(codes, [(0, groups * size - codes.shape[0]), (0, 0)])
            column_sums = codes.astype(np.float32).reshape(groups, size, -1).sum(axis=1)

            def anchor(_call, data_codes, packed, rows, sums, scales):
                real = dense_int8_groups(data_codes, rows, packed, sums, self.vnni, tiles)
                return requantize.dequantize_columns(real, scales)
        else:  # the calibrated scale, as (scale, low) for every row
            input_scale = self.table.tensors[self.names[call.args[data]]]
            args[data] = self._u8(call.args[data], args[data], input_scale)
            row_params = relax.const(np.array([input_scale.scale, -input_scale.zero_point * input_scale.scale],
                                              np.float32))
            column_sums = codes.astype(np.float32).sum(axis=0)
            tiles = self.amx and fits_amx(codes.shape[0] + -codes.shape[0] % QUAD, 1, block)

            def anchor(_call, data_codes, packed, rows, sums, scales):
                return dequantize_product(dense_int8(data_codes, packed, self.vnni, tiles), rows, sums, scales)
        args[weight] = relax.const(pack_dense_quads(codes, block))

        def compute(*tensors):
            extra = tensors[len(params):]
            return composite_compute(func.body, params, lambda *a: anchor(*a, *extra))(*tensors[:len(params)])

        extra = [row_params, relax.const(column_sums), relax.const(scale)]
        rebind(self, binding, kernel_call(self.builder_, func, compute, [*args, *extra], "int8_", {INT8_ATTR: True}))

    def _rows_as_codes(self, original: relax.Var, value: relax.Expr, flat: bool = False
                       ) -> tuple[relax.Expr, relax.Var]:
        """(u8 codes [..., groups, size], per group (scale, low)) of `value`, by one kernel per
        tensor however many dense layers read it; `flat`: the codes as [..., groups * size]
        (what AMX tiles read, `compute.dense_int8_groups`), a reshape of the same memory."""
        if original not in self.row_codes:
            kernel = self.builder_.call_te(quantize_rows, value, self.lanes, primfunc_name_hint="quantize_rows",
                                           primfunc_attrs={KERNEL_ATTR: "quantize_rows", OP_PATTERN_ATTR: OPAQUE})
            both = self.builder_.emit(kernel)
            self.row_codes[original] = (self.builder_.emit(relax.TupleGetItem(both, 0)),
                                        self.builder_.emit(relax.TupleGetItem(both, 1)))
        codes, params = self.row_codes[original]
        if flat:
            *rows, groups, size = codes.ty.shape.values
            codes = self.builder_.emit(relax.op.reshape(codes, [*rows, groups * size]))
        return codes, params

    def _quantized_depthwise(self, binding: relax.VarBinding) -> None:
        """A depthwise conv kernel, its epilogue rounding to u8 codes on the scale its readers take."""
        call = binding.value
        func = self.mod[call.op]
        output = self.codes[binding.var]
        real = composite_compute(func.body, list(func.params), anchor_compute)
        compute = lambda *tensors: _quantized(real(*tensors[:-1]), func, output, tensors[-1])  # noqa: E731
        args = [self.visit_expr(a) for a in call.args]
        rebind(self, binding, kernel_call(self.builder_, func, compute,
                                          [*args, relax.const(_epilogue_scales(None, output))]))

    def _on_grids(self, call: relax.Call) -> relax.Call:
        """`call` reading each tensor whose QDQ pair `frontend.qdq` took out of the graph
        rounded to that pair's grid, as the model computes: the pair went for the int8 kernels
        that round their inputs themselves, and this reader is none of them."""
        def argument(arg):
            if isinstance(arg, relax.Tuple):
                return relax.Tuple([argument(field) for field in arg.fields])
            scale = self.table.tensors.get(self.names.get(arg)) if isinstance(arg, relax.Var) else None
            if scale is None or not isinstance(arg.ty, relax.TensorType) or str(arg.ty.dtype) != "float32":
                return self.visit_expr(arg)
            if arg not in self.rounded:
                self.rounded[arg] = self.builder_.emit(self.builder_.call_te(
                    requantize.on_grid, self.visit_expr(arg), scale.scale, scale.zero_point, primfunc_name_hint="on_grid"))
            return self.rounded[arg]

        return relax.Call(call.op, [argument(a) for a in call.args], call.attrs, call.ty_args)

    def _pass_codes(self, binding: relax.VarBinding) -> None:
        """A max-pool or concat on the u8 codes of its inputs."""
        call = binding.value
        rebind(self, binding, relax.Call(call.op, [self.visit_expr(a) for a in call.args], call.attrs))

    def _u8(self, original: relax.Var, value: relax.Expr, scale: TensorScale) -> relax.Expr:
        """`value` as u8 codes: itself from an int8 kernel, else quantized (once per tensor),
        its channel block padded to whole quads (the image's 3 channels to 4). The blocked
        copy of an NCHW tensor (the network's input) is quantized from the NCHW tensor itself,
        in one pass that also blocks it."""
        if value.ty.dtype == "uint8":
            return value
        if original not in self.quantized:
            block = -(-int(value.ty.shape[-1]) // QUAD) * QUAD
            source = blocked_from_nchw(self.values.get(original))
            if source is not None:
                call = self.builder_.call_te(requantize.quantize_to_blocked, self.visit_expr(source), scale.scale,
                                             scale.zero_point, int(value.ty.shape[-1]), block,
                                             primfunc_name_hint="quantize")
            else:
                call = self.builder_.call_te(requantize.quantize, value, scale.scale, scale.zero_point, block,
                                             primfunc_name_hint="quantize")
            self.quantized[original] = self.builder_.emit(call)
        return self.quantized[original]

    def _weights(self, weight: np.ndarray, data: TensorScale, data_block: int, arrange):
        """(packed s8 weights, the s32 -> real multiplier, [the s32 correction for the data's
        zero point] or [] for a zero point of 0), the last two per output channel as
        (1, C, 1, 1, c). Input channels the data's padded block adds get zero weights; the
        codes are `arrange`d (input blocks merged or taps folded for AMX) before packing."""
        padding = [(0, 0)] * weight.ndim
        padding[4] = (0, data_block - weight.shape[4])
        weight = np.pad(weight, padding)
        codes, scale = quantize_blocked_weight(weight, S8_MAX if self.vnni else S7_MAX, self.per_channel)
        per_channel = (1, scale.shape[0], 1, 1, scale.shape[1])
        correction = (-data.zero_point * codes.astype(np.int32).sum(axis=(1, 2, 3, 4))).astype(np.int32)
        corrections = [relax.const(correction.reshape(per_channel))] if data.zero_point else []
        return pack_vnni(arrange(codes)), (data.scale * scale).reshape(per_channel), corrections


# An int8 kernel's scales, apart from its weights', as one parameter rather than constants of its
# code, so that the kernels of one shape are one function: its residual's scale and zero point,
# then 1 / its output's scale and the output code's shift (`requantize.code_shift`).
_RESIDUAL_SCALE, _RESIDUAL_ZERO_POINT, _OUTPUT_INVERSE_SCALE, _OUTPUT_SHIFT = range(4)


def _epilogue_scales(residual: TensorScale | None, output: TensorScale | None) -> np.ndarray:
    scales = np.zeros(4, np.float32)
    if residual is not None:
        scales[[_RESIDUAL_SCALE, _RESIDUAL_ZERO_POINT]] = residual.scale, residual.zero_point
    if output is not None:
        scales[[_OUTPUT_INVERSE_SCALE, _OUTPUT_SHIFT]] = 1.0 / output.scale, requantize.code_shift(output.zero_point)
    return scales


def _int8_compute(func: relax.Function, params, anchor_call, zero_point: int, residual: bool,
                  output: TensorScale | None, vnni: bool, amx: bool, folded_taps: int = 0):
    """The kernel's tensors: the composite's, its scales (`_epilogue_scales`), the accumulator's
    multiplier and, for a data `zero_point` other than 0, its correction. `folded_taps`: the kernel's width, if its rows of
    taps are folded into the input block."""
    attrs = anchor_call.attrs
    geometry = ([int(s) for s in attrs.strides], [int(p) for p in attrs.padding], [int(d) for d in attrs.dilation])

    def compute(*tensors):
        composite_inputs, (scales, multiplier, *correction) = tensors[:len(params)], tensors[len(params):]

        def anchor(_call, data, weight):
            if folded_taps:
                data, *folded_geometry = fold_row_taps(data, folded_taps, *geometry, pad_value=zero_point)
                acc = conv2d_nchwc_int8(data, weight, *folded_geometry, vnni=vnni, amx=amx)
            else:
                acc = conv2d_nchwc_int8(data, weight, *geometry, data_zero_point=zero_point, vnni=vnni, amx=amx)
            return requantize.dequantize_accumulator(acc, multiplier, *correction)

        def inputs(param, tensor):
            if residual and tensor.dtype == "uint8" and not param.same_as(anchor_call.args[0]):
                return requantize.dequantize(tensor, scales[_RESIDUAL_SCALE], scales[_RESIDUAL_ZERO_POINT])
            return tensor

        real = composite_compute(func.body, params, anchor, inputs)(*composite_inputs)
        return real if output is None else _quantized(real, func, output, scales)

    return compute


def _quantized(real, func: relax.Function, output: TensorScale, scales: te.Tensor):
    """The composite `func`'s result `real` rounded to u8 codes on `output`'s scale, as
    `scales` (`_epilogue_scales`) hold it."""
    if output.zero_point == 0 and _op_name(func.body.blocks[0].bindings[-1].value) == "relax.nn.relu":
        real = real.op.input_tensors[0]  # the quantize's saturation at code 0 is the ReLU
    return requantize.requantized(real, scales[_OUTPUT_INVERSE_SCALE], scales[_OUTPUT_SHIFT])


def _depthwise(mod: tvm.IRModule, value: relax.Expr) -> bool:
    """Whether `value` calls a composite whose anchor is a depthwise conv."""
    func = composite_of(mod, value)
    return func is not None and anchor_of(func).is_depthwise_conv()


def _u8_plan(mod: tvm.IRModule, values: dict[relax.Var, relax.Expr], convs: dict[relax.Var, QuantizableConv],
             table: CalibrationTable, names: dict[relax.Var, str]) -> dict[relax.Var, TensorScale]:
    """The variables that hold u8 codes, and their scale: the output of an int8 conv whose
    readers all take codes, and of the ops between int8 convs that can pass codes along. A
    max-pool commutes with rounding to a grid, so it keeps its input's scale. A channel
    concat of int8 convs read by nothing else takes its own scale, which its inputs write
    their codes on (oneDNN's way: no requantizing). A depthwise conv read only by int8
    kernels writes codes on its output's scale. `values`: each binding of `main`'s value."""
    read_by = readers(mod["main"])

    def sources(var: relax.Var) -> list:
        return list(values[var].args[0].fields) if _op_name(values.get(var)) == "relax.concat" else []

    def passes_codes(var: relax.Var) -> bool:
        op = _op_name(values.get(var))
        if op in _U8_POOLS:
            return True
        concat = op == "relax.concat" and int(values[var].attrs.axis) == 1 and names.get(var) in table.tensors
        return concat and all(s in convs and read_only_by(read_by, s, var)
                              for s in sources(var))

    def taken_as_codes(var: relax.Var, codes: set) -> bool:
        found = read_by.get(var)
        return bool(found) and all(r is not None and (r.var in convs or (passes_codes(r.var) and r.var in codes))
                                   for r in found)

    coded = largest_set(values, taken_as_codes)  # read only as codes

    plan: dict[relax.Var, TensorScale] = {}
    concat_of = {s: var for var in values if passes_codes(var) for s in sources(var)}
    for var, value in values.items():
        if _depthwise(mod, value) and var in coded and names.get(var) in table.tensors:
            plan[var] = table.tensors[names[var]]
        elif var in convs and var in coded:
            name = names.get(concat_of[var]) if var in concat_of else convs[var].output
            if name in table.tensors:
                plan[var] = table.tensors[name]
        elif var not in convs and passes_codes(var) and var in coded:
            inputs = sources(var) or [value.args[0]]
            if all(i in plan for i in inputs):
                plan[var] = plan[inputs[0]] if not sources(var) else table.tensors[names[var]]
    return plan


def _op_name(value: relax.Expr) -> str | None:
    return value.op.name if isinstance(value, relax.Call) and isinstance(value.op, tvm.ir.Op) else None
