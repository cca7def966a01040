import onnx
import pytest

from tests.conftest import tiny_model
from tvm_fuse import ModelLoadError
from tvm_fuse.frontend.load import load_model


def test_path_bytes_and_proto_give_the_same_model(tmp_path):
    model = tiny_model()
    path = tmp_path / "tiny.onnx"
    onnx.save(model, path)
    for source in (path, str(path), model.SerializeToString(), model):
        assert load_model(source).graph == model.graph


def test_missing_file_is_named(tmp_path):
    with pytest.raises(ModelLoadError, match="nope.onnx does not exist"):
        load_model(tmp_path / "nope.onnx")


def test_directory_is_not_a_model(tmp_path):
    with pytest.raises(ModelLoadError, match="is a directory"):
        load_model(tmp_path)


def test_text_file_is_not_onnx(tmp_path):
    path = tmp_path / "notes.onnx"
    path.write_text("this is not a model\n" * 10)
    with pytest.raises(ModelLoadError, match="notes.onnx"):
        load_model(path)


@pytest.mark.parametrize("keep", [0.1, 0.5, 0.9])
def test_truncated_model_is_reported(tmp_path, keep):
    data = tiny_model().SerializeToString()
    path = tmp_path / "cut.onnx"
    path.write_bytes(data[: int(len(data) * keep)])
    with pytest.raises(ModelLoadError, match="truncated|not a valid ONNX"):
        load_model(path)


def test_invalid_graph_is_reported_by_the_checker():
    model = tiny_model()
    model.graph.node[1].input[0] = "nowhere"
    with pytest.raises(ModelLoadError, match="not a valid ONNX model"):
        load_model(model)


def test_wrong_type_is_rejected():
    with pytest.raises(ModelLoadError, match="not list"):
        load_model([1, 2])


def test_a_negative_dim_other_than_minus_one_is_named():
    with pytest.raises(ModelLoadError, match="tensor 'x' has the dim -2 at axis 0"):
        load_model(tiny_model(batch=-2))


def test_a_model_without_outputs_is_refused():
    model = tiny_model()
    del model.graph.output[:]
    with pytest.raises(ModelLoadError, match="no graph outputs"):
        load_model(model)


def test_graph_outputs_without_a_shape_load_with_the_shapes_inferred():
    # ONNX Runtime runs such a model; the ONNX checker alone would refuse it.
    model = tiny_model()
    model.graph.output[0].type.tensor_type.ClearField("shape")
    loaded = load_model(model)
    assert loaded.graph.output[0].type.tensor_type.shape == tiny_model().graph.output[0].type.tensor_type.shape
