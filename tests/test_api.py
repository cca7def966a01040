"""build()'s errors: cause first, then the node, then the target in its brief form."""

import pytest

import tvm_fuse
from tests.conftest import tiny_model
from tvm_fuse import CompileError, parse_target
from tvm_fuse.target import target_string


def test_a_compile_error_starts_with_its_cause_and_names_the_node(monkeypatch):
    def fail(mod, target, model=None):  # as TVM reports a pass that chokes on a binding: by its variable
        raise RuntimeError("cannot lower the call that binds n1x")

    monkeypatch.setattr("tvm_fuse.api.lowered", fail)
    with pytest.raises(CompileError) as raised:
        tvm_fuse.build(tiny_model(), "native")
    message = str(raised.value)
    assert message.startswith("cannot lower the call that binds n1x at ONNX node(s) act (Relu)")
    brief = target_string(parse_target("native"), brief=True)
    assert f"(while compiling for {brief})" in message and len(brief) < 200
    # tiny_model's batch is symbolic: the error says what fixing it takes
    assert message.endswith("The model's inputs have symbolic dims ('x': ('batch', 4)): building with "
                            "input_shapes={name: shape} fixes them, which may avoid this")
    assert ",-" not in brief and "=-" not in brief  # the features turned off are left out
