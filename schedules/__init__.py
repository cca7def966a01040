"""x86 schedules for tvm_fuse's compute definitions (installed as `tvm_fuse.schedules`).

Compute definitions live in the package (`tvm_fuse.compute`), their schedules here, so each
can change without the other. A kernel's anchor block names its schedule in its
`schedule_rule` attribute; `apply` dispatches on it. Every schedule takes its knobs as a frozen
dataclass with a heuristic default, and lists the settings a tuner may try (`knob_space`).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import asdict
from typing import NamedTuple

import tvm
from tvm import s_tir

from ..ir_names import (
    ATTENTION_BF16_RULE,
    ATTENTION_RULE,
    CONV_NCHW_RULE,
    CONV_NCHWC_AMX_RULE,
    CONV_NCHWC_BF16_RULE,
    CONV_NCHWC_INT8_RULE,
    CONV_NCHWC_RULE,
    DENSE_AMX_GROUPS_RULE,
    DENSE_AMX_RULE,
    DENSE_BF16_RULE,
    DENSE_INT8_GROUPS_RULE,
    DENSE_INT8_RULE,
    DENSE_PACKED_RULE,
    DEPTHWISE_NCHWC_RULE,
    KNOBS_ATTR,
    LRN_RULE,
    MATMUL_RULE,
    ROWWISE_RULE,
    WINOGRAD_NCHWC_BF16_RULE,
    WINOGRAD_NCHWC_RULE,
)
from . import (
    amx,
    attention,
    conv_nchw,
    conv_nchwc,
    conv_nchwc_bf16,
    conv_nchwc_dot,
    conv_nchwc_int8,
    dense_bf16,
    dense_dot,
    dense_int8,
    dense_packed,
    lrn,
    matmul,
    rowwise,
    winograd_nchwc,
    winograd_nchwc_bf16,
)
from .common import UnboundedTileError, anchor_block, check_tiles_bounded


class Rule(NamedTuple):
    schedule: Callable  # (sch, block, lanes, knobs=None)
    knobs: type  # the knobs' frozen dataclass
    default: Callable  # (sch, block, lanes) -> knobs for shapes never tuned
    space: Callable  # (sch, block, lanes) -> every knob setting a tuner may try
    # The axis of the images in the anchor's data and output, where the knobs of one image suit
    # every batch (its tuning records serve them, `tuning.workload.workload_keys`).
    batch_axis: int | None = None


RULES = {
    ATTENTION_RULE: Rule(attention.schedule, attention.AttentionKnobs, attention.default_knobs,
                         attention.knob_space),
    ATTENTION_BF16_RULE: Rule(attention.schedule_bf16, attention.AttentionKnobs, attention.default_knobs,
                              attention.knob_space_bf16),
    CONV_NCHW_RULE: Rule(conv_nchw.schedule, conv_nchw.ConvKnobs, conv_nchw.default_knobs, conv_nchw.knob_space),
    CONV_NCHWC_RULE: Rule(conv_nchwc.schedule, conv_nchwc.ConvNCHWcKnobs, conv_nchwc.default_knobs,
                          conv_nchwc.knob_space, batch_axis=0),
    CONV_NCHWC_INT8_RULE: Rule(conv_nchwc_int8.schedule, conv_nchwc_dot.DotProductConvKnobs,
                               conv_nchwc_dot.default_knobs, conv_nchwc_dot.knob_space, batch_axis=0),
    CONV_NCHWC_BF16_RULE: Rule(conv_nchwc_bf16.schedule, conv_nchwc_dot.DotProductConvKnobs,
                               conv_nchwc_dot.default_knobs, conv_nchwc_dot.knob_space, batch_axis=0),
    DEPTHWISE_NCHWC_RULE: Rule(conv_nchwc.schedule_depthwise, conv_nchwc.DepthwiseNCHWcKnobs,
                               conv_nchwc.default_depthwise_knobs, conv_nchwc.depthwise_knob_space, batch_axis=0),
    LRN_RULE: Rule(lrn.schedule, lrn.LrnKnobs, lrn.default_knobs, lrn.knob_space),
    MATMUL_RULE: Rule(matmul.schedule, matmul.MatmulKnobs, matmul.default_knobs, matmul.knob_space),
    DENSE_PACKED_RULE: Rule(dense_packed.schedule, dense_packed.DensePackedKnobs, dense_packed.default_knobs,
                            dense_packed.knob_space),
    DENSE_BF16_RULE: Rule(dense_bf16.schedule, dense_packed.DensePackedKnobs, dense_dot.default_knobs,
                          dense_dot.knob_space),
    DENSE_INT8_RULE: Rule(dense_int8.schedule, dense_packed.DensePackedKnobs, dense_dot.default_knobs,
                          dense_dot.knob_space),
    DENSE_INT8_GROUPS_RULE: Rule(dense_int8.schedule_groups, dense_packed.DensePackedKnobs,
                                 dense_int8.default_group_knobs, dense_int8.group_knob_space),
    CONV_NCHWC_AMX_RULE: Rule(amx.conv.schedule, amx.conv.ConvTiles, amx.conv.default_knobs, amx.conv.knob_space),
    DENSE_AMX_RULE: Rule(amx.dense.schedule, amx.machine.Tiles, amx.dense.default_knobs, amx.dense.knob_space),
    DENSE_AMX_GROUPS_RULE: Rule(amx.dense.schedule_groups, amx.machine.Tiles, amx.dense.default_group_knobs,
                                amx.dense.group_knob_space),
    ROWWISE_RULE: Rule(rowwise.schedule, rowwise.RowwiseKnobs, rowwise.default_knobs, rowwise.knob_space),
    WINOGRAD_NCHWC_RULE: Rule(winograd_nchwc.schedule, winograd_nchwc.WinogradKnobs,
                              winograd_nchwc.default_knobs, winograd_nchwc.knob_space, batch_axis=2),
    WINOGRAD_NCHWC_BF16_RULE: Rule(winograd_nchwc_bf16.schedule, winograd_nchwc.WinogradKnobs,
                                   winograd_nchwc.default_knobs, winograd_nchwc.knob_space, batch_axis=2),
}


def apply(func: tvm.tirx.PrimFunc, vector_lanes: int, knobs: dict | None = None) -> tvm.tirx.PrimFunc:
    """`func` scheduled by the rule its anchor block names, with `knobs` (a tuning record's)
    or the rule's default; unchanged if it names no rule."""
    sch = s_tir.Schedule(func)
    found = anchor_block(sch)
    if found is None:
        return func
    block, name = found
    rule = RULES[name]
    if knobs is not None:
        try:
            rule.schedule(sch, block, vector_lanes, rule.knobs(**knobs))
            check_tiles_bounded(sch.mod["main"])
            return sch.mod["main"].with_attr(KNOBS_ATTR, "tuned")
        except (TypeError, ValueError, s_tir.ScheduleError, tvm.error.InternalError) as error:
            warnings.warn(f"tuned knobs {knobs} do not fit this {name} kernel, using the default: {error}")
            sch = s_tir.Schedule(func)
            block, _ = anchor_block(sch)
    try:
        rule.schedule(sch, block, vector_lanes)
        check_tiles_bounded(sch.mod["main"])
    except (s_tir.ScheduleError, tvm.error.InternalError, UnboundedTileError) as error:
        # Still correct, only slow: say so rather than fail the build.
        warnings.warn(f"schedule {name} does not apply to this kernel, left unscheduled: {error}")
        return func
    return sch.mod["main"].with_attr(KNOBS_ATTR, "default")


def knob_space(func: tvm.tirx.PrimFunc, vector_lanes: int) -> list[dict]:
    """Every knob setting of `func`'s schedule, its default first ([] without a rule)."""
    sch = s_tir.Schedule(func)
    found = anchor_block(sch)
    if found is None:
        return []
    block, name = found
    rule = RULES[name]
    default = asdict(rule.default(sch, block, vector_lanes))
    return [default] + [k for k in map(asdict, rule.space(sch, block, vector_lanes)) if k != default]
