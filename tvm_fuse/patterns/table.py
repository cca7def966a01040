"""The fusion table: an anchor (conv or fc) followed by optional post-ops in oneDNN's order,

    anchor -> [bias] -> [bn: per-channel scale/shift] -> [activation] -> [scale/shift] -> [sum] -> [activation]

where `sum` is the residual add (`dst = dst + op(...)`). Every match becomes one composite
function and, later, one kernel whose epilogue applies the chain. Each (anchor, slot) pair is a
*family* that can be switched off (`switches`), e.g. `conv_relu` or `fc_sum`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection
from dataclasses import dataclass

import tvm
from tvm import relax
from tvm.ir.expr import GenericConst
from tvm.relax.dpl import CallPattern, DFPattern, OrPattern, is_const, is_op, wildcard
from tvm.relax.transform import FusionPattern, PatternCheckContext

from .. import provenance
from ..compute.conv import is_depthwise
from ..ir_names import ANCHOR_ATTR, NODES_ATTR, PATTERN_ATTR
from .activations import ACTIVATIONS


@dataclass(frozen=True)
class Anchor:
    """The op a kernel is built around; its weights must be constant (packed at build time)."""

    family: str  # switch prefix: conv, fc
    pattern: Callable[[], DFPattern]
    kind: Callable[[relax.Call], str | None]  # the matched call -> its name in reports, None to refuse


@dataclass(frozen=True)
class Slot:
    """An optional post-op position in the chain."""

    name: str
    family: str  # switch suffix: the family is f"{anchor.family}_{slot.family}"
    extend: Callable[[DFPattern, dict], DFPattern]  # chain so far, annotations -> chain with the op
    after: str | None = None  # only directly after this slot


_CONV_LAYOUTS = {1: ("NCW", "OIW"), 2: ("NCHW", "OIHW")}  # rank -> the plain layouts the computes take
_BLOCKED = re.compile(r"NCHW(\d+)c")  # `transform.blocked_layout`'s data layout


def _conv_kind(call: relax.Call) -> str | None:
    attrs, (data, weight) = call.attrs, call.args
    if not _float32(data, weight, call):
        return None
    blocked = _BLOCKED.fullmatch(str(attrs.data_layout))
    out_blocked = _BLOCKED.fullmatch(str(attrs.out_layout))
    if blocked and out_blocked:
        block, out_block = int(blocked.group(1)), int(out_blocked.group(1))
        kernels = {f"OIHW{block}i{out_block}o"} | ({f"OIHW1i{block}o"} if block == out_block else set())
        if str(attrs.kernel_layout) not in kernels:
            return None
        rank = 2
    else:
        rank = len(weight.ty.shape) - 2
        layouts = (attrs.data_layout, attrs.kernel_layout)
        if attrs.out_layout != attrs.data_layout or layouts != _CONV_LAYOUTS.get(rank):
            return None
    name = f"conv{rank}d"
    if attrs.groups == 1:
        return name
    if is_depthwise(attrs.groups, weight.ty.shape):
        return f"depthwise_{name}"
    return f"group_{name}"


def _fc_kind(call: relax.Call) -> str | None:
    x, weight = call.args
    if x.ty.ndim < 2 or weight.ty.ndim < 2 or not _float32(x, weight, call):  # numpy's vector cases
        return None
    return "dense" if weight.ty.ndim == 2 else "batch_matmul"


ANCHORS = (
    Anchor("conv", lambda: is_op("relax.nn.conv2d")(wildcard(), is_const())
           | is_op("relax.nn.conv1d")(wildcard(), is_const()), _conv_kind),
    Anchor("fc", lambda: is_op("relax.matmul")(wildcard(), is_const()), _fc_kind),
)


def _annotate(annotations: dict, name: str, pattern: DFPattern) -> DFPattern:
    annotations[name] = pattern
    return pattern


def _add(chain, operand):
    return is_op("relax.add")(chain, operand) | is_op("relax.add")(operand, chain)


def _activation(slot: str):
    def extend(chain: DFPattern, annotations: dict) -> DFPattern:
        choices = [_annotate(annotations, f"{slot}.{a.name}", a.pattern(chain)) for a in ACTIVATIONS]
        alternatives = choices[0]
        for choice in choices[1:]:
            alternatives = alternatives | choice
        return alternatives

    return extend


SLOTS = (
    Slot("bias", "bias", lambda chain, ann: _annotate(ann, "bias", _add(chain, is_const()))),
    Slot("bn", "bn", lambda chain, ann: _annotate(
        ann, "bn", is_op("relax.add")(is_op("relax.multiply")(chain, is_const()), is_const()))),
    Slot("activation", "relu", _activation("activation")),  # MXNet's CONV_RELU, any activation
    # A constant scale and shift after the activation (PP-LCNetV3's learnable affine): oneDNN's
    # eltwise_linear post-op; its family is bn's, a per-channel scale and shift.
    Slot("scale", "bn", lambda chain, ann: _annotate(
        ann, "scale", _add(is_op("relax.multiply")(chain, is_const()) | is_op("relax.multiply")(is_const(), chain),
                           is_const())), after="activation"),
    Slot("sum", "sum", lambda chain, ann: _annotate(ann, "sum", _add(chain, wildcard()))),
    Slot("sum_activation", "sum", _activation("sum_activation"), after="sum"),
)

ATTENTION_FAMILY = "attention"  # softmax(Q K^T * c + mask) V in one kernel (`transform/fuse_attention.py`)
FAMILIES = tuple(f"{a.family}_{f}" for a in ANCHORS for f in dict.fromkeys(s.family for s in SLOTS)) + (
    ATTENTION_FAMILY,)


def fusion_patterns(disabled: Collection[str] = ()) -> list[FusionPattern]:
    """One `FusionPattern` per anchor; each enabled slot is optional (matched when present)."""
    patterns = []
    for anchor in ANCHORS:
        annotations: dict[str, DFPattern] = {}
        chain = _annotate(annotations, "anchor", anchor.pattern())
        ends: dict[str, DFPattern] = {}  # slot -> chains ending in it
        for slot in SLOTS:
            if f"{anchor.family}_{slot.family}" in disabled or (slot.after and slot.after not in ends):
                continue
            base = ends[slot.after] if slot.after else chain
            ends[slot.name] = slot.extend(base, annotations)
            _annotate_calls(ends[slot.name], base, annotations)
            chain = chain | ends[slot.name]
        patterns.append(
            FusionPattern(f"tvm_fuse.{anchor.family}", chain, annotations, _checker(anchor), _namer(anchor))
        )
    return patterns


def _annotate_calls(pattern: DFPattern, base: DFPattern, annotations: dict) -> None:
    """Annotate every call of `pattern` above `base`, so a match reports each op it took (an
    activation may be several ops, each from its own ONNX node)."""
    seen: list[DFPattern] = []

    def walk(node: DFPattern) -> None:
        if node.same_as(base) or any(node.same_as(s) for s in seen):
            return
        seen.append(node)
        if isinstance(node, CallPattern):
            annotations[f"op#{len(annotations)}"] = node
            for arg in node.args:
                walk(arg)
        elif isinstance(node, OrPattern):
            walk(node.left)
            walk(node.right)

    walk(pattern)


def composite_of(mod: tvm.IRModule, value) -> relax.Function | None:
    """The composite function `value` calls (a kernel of the fusion table), or None."""
    if not (isinstance(value, relax.Call) and isinstance(value.op, relax.GlobalVar)):
        return None
    func = mod[value.op]
    return func if isinstance(func, relax.Function) and ANCHOR_ATTR in (func.attrs or {}) else None


def composite_nodes(func: relax.Function) -> list[int]:
    """The ONNX nodes a composite function computes (its `NODES_ATTR`)."""
    return [int(i) for i in str(func.attrs[NODES_ATTR]).split(",") if i]


def _namer(anchor: Anchor):
    def attrs(annotated) -> dict[str, str]:
        # Also the ONNX nodes: it keeps equal chains at different places apart (the module
        # would otherwise share one function between them) and feeds the fusion report.
        nodes = sorted({i for expr in annotated.values() for i in provenance.span_nodes(expr)})
        steps = [anchor.kind(annotated["anchor"])]
        for slot in SLOTS:
            steps += [slot.name] if slot.name in annotated else []
            steps += [key.split(".", 1)[1] for key in annotated if key.startswith(f"{slot.name}.")]
        return {PATTERN_ATTR: "+".join(steps), ANCHOR_ATTR: anchor.family, NODES_ATTR: ",".join(map(str, nodes))}

    return attrs


def _checker(anchor: Anchor):
    def check(context: PatternCheckContext) -> bool:
        annotated = context.annotated_expr
        if anchor.kind(annotated["anchor"]) is None:
            return False
        matched = set(context.matched_bindings.keys())
        root = next(v for v, e in context.matched_bindings.items() if e.same_as(context.matched_expr))
        # An intermediate read outside the match would need its own output: leave it unfused.
        for var in matched:
            if not var.same_as(root) and any(user not in matched for user in context.var_usages.get(var, [])):
                return False
        out_shape = annotated["anchor"].ty.shape
        for slot in ("bias", "bn", "scale", "sum"):
            if slot in annotated and not operands_fit(annotated[slot], out_shape, matched):
                return False
        # A constant added is a bias (its own family), not a residual.
        sum_call = annotated.get("sum")
        return sum_call is None or not any(isinstance(a, GenericConst) for a in sum_call.args)

    return check


def operands_fit(call: relax.Call, out_shape, matched) -> bool:
    """The op's operands from outside the chain broadcast into the anchor's output shape."""
    for operand in call.args:
        if isinstance(operand, relax.Var) and operand in matched:
            continue
        if isinstance(operand, relax.Call):  # bn's inner multiply
            if not operands_fit(operand, out_shape, matched):
                return False
            continue
        shape = operand.ty.shape
        if shape is None or len(shape) > len(out_shape) or operand.ty.dtype != "float32":
            return False
        for dim, out_dim in zip(reversed(list(shape)), reversed(list(out_shape))):
            if not (_same(dim, 1) or _same(dim, out_dim)):
                return False
    return True


def _float32(*exprs) -> bool:
    return all(e.ty.dtype == "float32" for e in exprs)


def _same(a, b) -> bool:
    return bool(tvm.sym.Analyzer().can_prove_equal(a, b))
