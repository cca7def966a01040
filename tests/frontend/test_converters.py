"""Our own conversions of ONNX ops (`tvm_fuse.frontend.converters`), through whole builds."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import tvm_fuse
from tests.compute.test_lrn import lrn_reference
from tests.conftest import assert_close, ort_outputs
from tests.differential.cases import Case
from tvm_fuse import UnsupportedOpsError


def _conv_lrn(channels: int, size: int):
    """Conv -> Relu -> LRN (GoogLeNet's alpha, beta and bias) on [1, 16, 14, 14]."""
    weight = np.random.default_rng(0).standard_normal((channels, 16, 3, 3)).astype(np.float32) * 0.3
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1], name="conv"),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("LRN", ["r"], ["y"], size=size, alpha=1e-4, beta=0.75, bias=1.0, name="norm")]
    graph = helper.make_graph(nodes, "conv_lrn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 14, 14])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, channels, 14, 14])],
                              [numpy_helper.from_array(weight, "w")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


@pytest.mark.avx512
@pytest.mark.parametrize("size", [5, 3])
def test_lrn_matches_onnx_runtime_in_one_kernel(size):
    model = _conv_lrn(48, size)
    feed = {"x": np.random.default_rng(1).standard_normal((1, 16, 14, 14)).astype(np.float32)}
    compiled = tvm_fuse.build(model, "native")
    (ours,), (reference,) = compiled.run(None, feed), ort_outputs(model, feed)
    np.testing.assert_allclose(ours, reference, rtol=1e-5, atol=1e-5 * np.abs(reference).max())
    assert [u["onnx_node"] for u in compiled.fusion_report()["unfused"]] == ["norm"]  # its own kernel
    assert "avg_pool" not in compiled.assembly()  # not TVM's pooled form


@pytest.mark.avx512
def test_an_even_lrn_window_is_placed_as_onnx_defines_it():
    """ONNX Runtime refuses even sizes; TVM's importer made one channel too many of them."""
    model = _conv_lrn(32, 4)
    x = np.random.default_rng(1).standard_normal((1, 16, 14, 14)).astype(np.float32)
    (ours,) = tvm_fuse.build(model, "native").run(None, {"x": x})
    (relu,) = tvm_fuse.build(_without_lrn(model), "native").run(None, {"x": x})
    np.testing.assert_allclose(ours, lrn_reference(relu, 4, 1e-4, 0.75, 1.0), rtol=1e-5)


@pytest.mark.vnni
def test_an_lrn_is_its_own_kernel_in_an_int8_build_not_fused_with_the_quantize_after_it():
    """TVM fused the LRN with the next conv's quantize into a kernel no schedule applied to
    (Inception-v1 int8: 0.126 ms, against 0.064 + 0.038 apart, AMX host)."""
    model = _conv_lrn(32, 5)
    weight = np.random.default_rng(2).standard_normal((16, 32, 1, 1)).astype(np.float32) * 0.3
    model.graph.node.append(helper.make_node("Conv", ["y", "w2"], ["z"], name="after"))
    model.graph.initializer.append(numpy_helper.from_array(weight, "w2"))
    model.graph.output[0].CopyFrom(helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, 16, 14, 14]))
    feed = {"x": np.random.default_rng(1).standard_normal((1, 16, 14, 14)).astype(np.float32)}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        compiled = tvm_fuse.build(model, "native", quantize=tvm_fuse.QuantConfig(calibration=[feed]))
    assert not [w for w in caught if "does not apply" in str(w.message)]
    assembly = compiled.assembly()
    assert "fused_lrn" not in assembly and "lrn" in assembly
    (ours,), (reference,) = compiled.run(None, feed), ort_outputs(model, feed)
    # int8 activations into a random 1x1 conv: 12% of the output's scale at most, as when fused
    np.testing.assert_allclose(ours, reference, rtol=0, atol=0.15 * np.abs(reference).max())
    assert np.corrcoef(ours.ravel(), reference.ravel())[0, 1] > 0.99


def _without_lrn(model):
    """`model` up to the LRN's input, which becomes the output."""
    graph = model.graph
    trimmed = helper.make_graph(list(graph.node)[:-1], "conv_relu", list(graph.input),
                                [helper.make_tensor_value_info("r", TensorProto.FLOAT, [1, 32, 14, 14])],
                                list(graph.initializer))
    return helper.make_model(trimmed, opset_imports=list(model.opset_import))


# --- found by tests/differential --------------------------------------------------------------


def _resize(shape, attrs: dict, scales=None, sizes=None):
    weights = {"scales": np.array(scales, np.float32)} if scales is not None else {"sizes": np.array(sizes, np.int64)}
    names = ["x", "", "scales"] if scales is not None else ["x", "", "", "sizes"]
    case = Case([helper.make_node("Resize", names, ["y"], name="resize_node", **attrs)],
                {"x": np.random.default_rng(0).standard_normal(shape).astype(np.float32)}, weights, opset=13)
    return case.model(), case.inputs


def test_a_resize_whose_scale_gives_a_fractional_size_is_refused():
    """TVM maps coordinates by the ratio of sizes (3 -> 1: 1/3), ONNX by the scale (0.5): a 2x3
    image scaled by 0.5 came out as its pixel (0, 1) where ONNX Runtime gives (0, 0)."""
    model, _ = _resize((1, 1, 2, 3), {"mode": "nearest"}, scales=[1, 1, 0.5, 0.5])
    with pytest.raises(UnsupportedOpsError, match=r"Resize \(node 'resize_node'.*scale 0.5 of axis 3 \(size 3\)"):
        tvm_fuse.build(model, "llvm")


@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
def test_a_resize_to_the_same_size_is_the_input(mode):
    """A 1x1 image resized to 1x1 divided by zero in TVM's kernel; at the same size every
    coordinate mapping but tf_half_pixel_for_nn is the identity."""
    for shape in ((1, 2, 1, 1), (1, 2, 3, 4)):
        model, feed = _resize(shape, {"mode": mode, "coordinate_transformation_mode": "align_corners"}, sizes=shape)
        (y,) = tvm_fuse.build(model, "llvm").run(None, feed)
        np.testing.assert_array_equal(y, ort_outputs(model, feed)[0])


@pytest.mark.parametrize("shape, attrs, sizes", [
    # Output pixels halfway between input pixels, which TVM computes with a rounded ratio of sizes
    # (2/3, 1/3): which side it takes depends on its code. The second took the wrong pixels
    # built for Zen 5 (with FMA); the third takes them anywhere (ONNX Runtime copies the axis of
    # unchanged size, TVM rounds its x + 0.5 up).
    ((1, 1, 2, 2), {"coordinate_transformation_mode": "half_pixel"}, [1, 1, 3, 2]),
    ((1, 2, 3, 4), {"coordinate_transformation_mode": "tf_half_pixel_for_nn"}, [1, 2, 9, 4]),
    ((1, 1, 1, 4), {"coordinate_transformation_mode": "tf_half_pixel_for_nn", "nearest_mode": "ceil"}, [1, 1, 2, 4]),
    # align_corners scales by 13/6, not by the sizes' ratio 2: pixel 3 maps to 6.5.
    ((1, 1, 14, 14), {"coordinate_transformation_mode": "align_corners"}, [1, 1, 7, 7]),
])
def test_a_nearest_resize_whose_ties_tvm_may_break_otherwise_is_refused(shape, attrs, sizes):
    model, _ = _resize(shape, {"mode": "nearest", **attrs}, sizes=sizes)
    with pytest.raises(UnsupportedOpsError, match="nearest"):
        tvm_fuse.build(model, "llvm")


@pytest.mark.parametrize("attrs, sizes", [({"coordinate_transformation_mode": "half_pixel"}, [1, 1, 12, 2]),
                                          ({"coordinate_transformation_mode": "asymmetric"}, [1, 1, 8, 8]),
                                          ({"coordinate_transformation_mode": "tf_half_pixel_for_nn"}, [1, 1, 8, 8])])
def test_a_nearest_resize_without_such_ties_matches_onnxruntime(attrs, sizes):
    """Scales of 3 (no output pixel halfway) and of 2 (a ratio exact in float32) build."""
    model, feed = _resize((1, 1, 4, 4) if sizes[2] == 8 else (1, 1, 4, 2), {"mode": "nearest", **attrs}, sizes=sizes)
    (y,) = tvm_fuse.build(model, "llvm").run(None, feed)
    np.testing.assert_array_equal(y, ort_outputs(model, feed)[0])


@pytest.mark.parametrize("shape, sizes", [((1, 1, 4, 4), [1, 1, 1, 3]),
                                          ((1, 1, 1, 1), [1, 1, 1, 2])])  # 1 -> 1 beside an axis that grows
def test_an_align_corners_resize_to_one_pixel_is_refused(shape, sizes):
    model, _ = _resize(shape, {"mode": "linear", "coordinate_transformation_mode": "align_corners"}, sizes=sizes)
    with pytest.raises(UnsupportedOpsError, match="align_corners to an output of size 1"):
        tvm_fuse.build(model, "llvm")


@pytest.mark.parametrize("mode", ["nearest", "linear"])
def test_resizes_of_symbolic_sizes_by_a_scale_match_onnxruntime(mode):
    """An image of symbolic height and width scaled by 2 twice, the second Resize reading a
    shape TVM no longer knows: both were taken for resizes to the same size, and the model
    returned its input."""
    scale = numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "scales")
    nodes = [helper.make_node("Resize", ["x", "", "scales"], ["y"], mode=mode),
             helper.make_node("Resize", ["y", "", "scales"], ["z"], mode=mode)]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, "h", "w"])],
                              [helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, 3, "H", "W"])], [scale])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    compiled = tvm_fuse.build(model, "llvm")
    for shape in ((1, 3, 4, 5), (1, 3, 2, 3)):
        feed = {"x": np.random.default_rng(0).standard_normal(shape).astype(np.float32)}
        (z,) = compiled.run(None, feed)
        np.testing.assert_allclose(z, ort_outputs(model, feed)[0], rtol=1e-5, atol=1e-6)


def test_an_lrn_on_an_image_of_symbolic_size_matches_onnxruntime():
    """Its kernel took a channel's pixels one vector at a time, which a symbolic count has no
    static number of: the build failed naming no node (found by the differential net)."""
    graph = helper.make_graph(
        [helper.make_node("LRN", ["x"], ["y"], size=3, alpha=1e-2, beta=0.75, bias=1.0)], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 1, "h", "w"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 1, "h", "w"])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    compiled = tvm_fuse.build(model, "llvm")
    for shape in ((2, 1, 2, 3), (1, 1, 5, 7)):
        feed = {"x": np.random.default_rng(0).standard_normal(shape).astype(np.float32)}
        np.testing.assert_allclose(compiled.run(None, feed)[0], ort_outputs(model, feed)[0], rtol=1e-5, atol=1e-6)


def _resize_to_shape_of_model(mode: str, coordinates: str):
    """y = Resize(x, sizes=[x's N, C] + z's H, W) + z: torch's `interpolate(x, size=z.shape[2:])`."""
    nodes = [helper.make_node("Shape", ["z"], ["hw"], start=2), helper.make_node("Shape", ["x"], ["nc"], end=2),
             helper.make_node("Concat", ["nc", "hw"], ["sizes"], axis=0),
             helper.make_node("Resize", ["x", "", "", "sizes"], ["r"], name="resize", mode=mode,
                              coordinate_transformation_mode=coordinates),
             helper.make_node("Add", ["r", "z"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 8, "h", "w"]),
                                           helper.make_tensor_value_info("z", TensorProto.FLOAT, ["n", 8, "H", "W"])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 8, "H", "W"])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("mode,coordinates", [("linear", "half_pixel"), ("linear", "pytorch_half_pixel"),
                                              ("cubic", "half_pixel")])
def test_resize_to_symbolic_sizes_matches_onnx_runtime_at_each_size(mode, coordinates):
    model = _resize_to_shape_of_model(mode, coordinates)
    compiled = tvm_fuse.build(model)  # one build, symbolic sizes
    rng = np.random.default_rng(0)
    for x, z in [((1, 8, 5, 7), (1, 8, 10, 14)), ((2, 8, 6, 4), (2, 8, 9, 13)), ((1, 8, 12, 12), (1, 8, 5, 3)),
                 ((1, 8, 1, 1), (1, 8, 4, 5))]:
        feed = {"x": rng.standard_normal(x).astype(np.float32), "z": rng.standard_normal(z).astype(np.float32)}
        assert_close(compiled.run(None, feed), ort_outputs(model, feed), rtol=1e-4)


@pytest.mark.parametrize("mode,coordinates,reason", [("nearest", "half_pixel", "nearest to sizes"),
                                                     ("linear", "align_corners", "align_corners to sizes")])
def test_other_resizes_to_symbolic_sizes_are_refused_by_name(mode, coordinates, reason):
    with pytest.raises(UnsupportedOpsError, match=rf"'resize'.*{reason} computed at run time"):
        tvm_fuse.build(_resize_to_shape_of_model(mode, coordinates))


def _max_pool_model(kernel: int, stride: int, mode: str):
    node = helper.make_node("MaxPool", ["x"], ["y"], name="pool", kernel_shape=[kernel, kernel], strides=[stride, stride],
                            auto_pad=mode)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4, "h", "w"])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 12)])


@pytest.mark.parametrize("kernel,stride,mode", [(2, 1, "SAME_UPPER"), (3, 1, "SAME_LOWER"), (2, 2, "SAME_UPPER")])
def test_same_max_pool_over_symbolic_sizes_matches_onnx_runtime_at_each_size(kernel, stride, mode):
    model = _max_pool_model(kernel, stride, mode)
    compiled = tvm_fuse.build(model)  # TVM's converter computed the padding in ints and failed
    for shape in [(1, 4, 7, 9), (2, 4, 8, 6), (1, 4, 1, 5)]:
        feed = {"x": np.random.default_rng(0).standard_normal(shape).astype(np.float32)}
        assert_close(compiled.run(None, feed), ort_outputs(model, feed), rtol=0)


@pytest.mark.parametrize("kernel,stride,mode", [(3, 2, "SAME_UPPER"), (3, 3, "SAME_UPPER"), (2, 2, "SAME_LOWER")])
def test_same_max_pool_whose_padding_depends_on_the_size_is_refused_by_name(kernel, stride, mode):
    with pytest.raises(UnsupportedOpsError, match=rf"'pool'.*{mode} padding over symbolic sizes"):
        tvm_fuse.build(_max_pool_model(kernel, stride, mode))


@pytest.mark.parametrize("kernel,stride,mode", [(3, 2, "SAME_UPPER"), (3, 2, "SAME_LOWER"), (2, 2, "SAME_UPPER")])
def test_same_max_pool_of_a_symbolic_batch_matches_onnx_runtime(kernel, stride, mode):
    model = _max_pool_model(kernel, stride, mode)
    model.graph.input[0].CopyFrom(helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4, 7, 10]))
    compiled = tvm_fuse.build(model)
    for batch in (1, 3):
        feed = {"x": np.random.default_rng(batch).standard_normal((batch, 4, 7, 10)).astype(np.float32)}
        assert_close(compiled.run(None, feed), ort_outputs(model, feed), rtol=0)
