"""float16 convs, matrix products, softmaxes and sums computed in float32, rounded to float16
once at the end, as CPU runtimes compute them.

Legalized as they are, TVM's kernels add float16 products in float16, and a sum over a few
hundred of them drifts: a float16 model's first conv (K = 256 x 3) came out 1.1e-2 of its largest
value from ONNX Runtime's, and its softmax 2.5 ulp of float16 away.
"""

from __future__ import annotations

import tvm
from tvm import relax

from .rebind import dtype, is_op, rebind_pass

_WIDE = "float32"


def _conv(op):
    def widened(call: relax.Call) -> relax.Expr:
        a = call.attrs
        kwargs = {"strides": a.strides, "padding": a.padding, "dilation": a.dilation, "groups": a.groups,
                  "data_layout": a.data_layout, "kernel_layout": a.kernel_layout, "out_layout": a.out_layout}
        if hasattr(a, "output_padding"):
            kwargs["output_padding"] = a.output_padding
        return op(*call.args, **kwargs, out_dtype=_WIDE)
    return widened


_WIDENED = {
    "relax.nn.conv1d": _conv(relax.op.nn.conv1d),
    "relax.nn.conv2d": _conv(relax.op.nn.conv2d),
    "relax.nn.conv1d_transpose": _conv(relax.op.nn.conv1d_transpose),
    "relax.nn.conv2d_transpose": _conv(relax.op.nn.conv2d_transpose),
    "relax.matmul": lambda call: relax.op.matmul(*call.args, out_dtype=_WIDE),
}


# Ops whose float16 inputs are widened, their attributes kept.
_ON_WIDENED_INPUTS = ("relax.nn.softmax", "relax.nn.log_softmax", "relax.sum", "relax.mean", "relax.variance")


def _on_widened_inputs(call: relax.Call) -> relax.Expr:
    return relax.Call(call.op, [relax.op.astype(arg, _WIDE) for arg in call.args], call.attrs)


def AccumulateHalfInFloat32() -> tvm.transform.Pass:
    return rebind_pass("tvm_fuse.AccumulateHalfInFloat32", _plan)


def _plan(func: relax.Function) -> dict[relax.Var, relax.Expr]:
    plan = {}
    for var, value in relax.analysis.get_var2val(func).items():
        widen = next((w for name, w in _WIDENED.items() if is_op(value, name)), None)
        if widen is None and any(is_op(value, name) for name in _ON_WIDENED_INPUTS):
            widen = _on_widened_inputs
        if widen is not None and dtype(value) == "float16":
            plan[var] = relax.op.astype(widen(value), "float16")
    return plan
