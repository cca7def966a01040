"""CompiledModel: the ONNX Runtime-style session API, input checks, export and load."""

import json
import threading

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

import tvm_fuse
from tests.conftest import AVX512_TARGET, assert_close, ort_outputs, tiny_model
from tests.quantization.models import residual_block
from tests.quantization.test_int8_build import TABLE
from tvm_fuse import ExportError, InputError
from tvm_fuse.target import host_cpu

pytestmark = pytest.mark.avx512


@pytest.fixture(scope="module")
def dynamic():
    """The tiny model with its batch dim left symbolic."""
    return tvm_fuse.build(tiny_model(), AVX512_TARGET)


def _x(batch=2, dtype=np.float32):
    return np.random.default_rng(0).standard_normal((batch, 4)).astype(dtype)


def test_signature_reads_like_onnxruntime(dynamic):
    (inp,) = dynamic.get_inputs()
    (out,) = dynamic.get_outputs()
    assert (inp.name, inp.shape, inp.dtype, inp.type) == ("x", ("batch", 4), "float32", "tensor(float)")
    assert out.name == "y" and out.shape[1] == 4


@pytest.mark.parametrize("batch", [1, 3, 7])
def test_dynamic_batch_matches_onnxruntime(dynamic, batch):
    feed = {"x": _x(batch)}
    assert_close(dynamic.run(None, feed), ort_outputs(tiny_model(), feed))


def test_a_minus_one_dim_is_symbolic_as_in_onnxruntime():
    """paddle2onnx writes -1 for a dynamic batch: it compiles as dynamic, or input_shapes fixes it."""
    model = tiny_model(batch=-1)
    dynamic = tvm_fuse.build(model, AVX512_TARGET)
    assert dynamic.get_inputs()[0].shape == ("x_dim0", 4)
    for batch in (1, 5):
        feed = {"x": _x(batch)}
        assert_close(dynamic.run(None, feed), ort_outputs(model, feed))
    fixed = tvm_fuse.build(model, AVX512_TARGET, input_shapes={"x": (3, 4)})
    assert fixed.get_inputs()[0].shape == (3, 4)
    assert_close(fixed.run(None, {"x": _x(3)}), ort_outputs(model, {"x": _x(3)}))


@settings(max_examples=25, deadline=None)
@given(x=st.integers(1, 33).flatmap(
    lambda batch: arrays(np.float32, (batch, 4), elements=st.floats(-1e3, 1e3, width=32))))
def test_any_batch_and_values_match_numpy(dynamic, x):
    w = np.arange(16, dtype=np.float32).reshape(4, 4) / 16
    (y,) = dynamic.run(None, {"x": x})
    np.testing.assert_allclose(y, np.maximum(x @ w, 0), rtol=1e-5, atol=1e-3)


def test_output_names_select_outputs(dynamic):
    feed = {"x": _x()}
    (all_y,) = dynamic.run(None, feed)
    (named_y,) = dynamic.run(["y"], feed)
    np.testing.assert_array_equal(all_y, named_y)
    assert dynamic.run([], feed) == []


@pytest.mark.parametrize(
    "feed, output_names, message",
    [
        ({}, None, "missing input\\(s\\) \\['x'\\]"),
        ({"x": _x(), "z": _x()}, None, "unknown input\\(s\\) \\['z'\\]"),
        ({"x": _x(dtype=np.float64)}, None, "dtype float64, but the model expects float32"),
        ({"x": np.zeros((2, 5), np.float32)}, None, "axis 1 must be 4"),
        ({"x": np.zeros((2, 4, 1), np.float32)}, None, "rank 3"),
        ({"x": np.zeros((0, 4), np.float32)}, None, "empty at axis 0"),
        ({"x": "hello"}, None, "cannot become a float32 array"),
        ({"x": _x()}, ["nope"], "unknown output"),
        ({"x": _x()}, "y", "list of names"),
        ([_x()], None, "dict of name"),
    ],
)
def test_bad_feeds_raise_input_error_naming_the_input(dynamic, feed, output_names, message):
    with pytest.raises(InputError, match=message):
        dynamic.run(output_names, feed)


@pytest.fixture(scope="module")
def static():
    """The tiny model at batch 2: its run takes feeds that match exactly without the full check."""
    return tvm_fuse.build(tiny_model(), AVX512_TARGET, input_shapes={"x": (2, 4)})


@pytest.mark.parametrize(
    "feed, message",
    [
        ({"x": _x(), "z": _x()}, "unknown input\\(s\\) \\['z'\\]"),
        ({"z": _x()}, "missing input\\(s\\) \\['x'\\]"),
        ({"x": _x(dtype=np.float64)}, "dtype float64, but the model expects float32"),
        ({"x": _x(3)}, "axis 0 must be 2"),
        ({"x": _x(2)[None]}, "rank 3"),
    ],
)
def test_a_static_build_checks_every_feed_that_does_not_match_exactly(static, feed, message):
    with pytest.raises(InputError, match=message):
        static.run(None, feed)


def test_a_static_build_takes_any_feed_that_converts(static):
    x = _x(2)
    expected = np.maximum(x @ (np.arange(16, dtype=np.float32).reshape(4, 4) / 16), 0)
    for value in (x, x.tolist(), np.asfortranarray(x), np.ma.masked_array(x), x.astype(np.float32, order="F")):
        np.testing.assert_allclose(static.run(None, {"x": value})[0], expected, rtol=1e-5, atol=1e-5)


def test_lists_and_non_contiguous_arrays_are_accepted(dynamic):
    x = _x(4)
    expected = dynamic.run(None, {"x": x})[0]
    np.testing.assert_array_equal(dynamic.run(None, {"x": x.tolist()})[0], expected)
    strided = np.asfortranarray(x)
    np.testing.assert_array_equal(dynamic.run(None, {"x": strided})[0], expected)


def _placed(x: np.ndarray, offset: int) -> np.ndarray:
    """A copy of `x` whose data starts `offset` bytes past a 64-byte boundary."""
    raw = np.empty(x.nbytes + 128, np.uint8)
    start = (-raw.ctypes.data) % 64 + offset
    placed = raw[start:start + x.nbytes].view(x.dtype).reshape(x.shape)
    placed[...] = x
    return placed


def test_aligned_unaligned_and_read_only_inputs_give_the_same_outputs(dynamic):
    """Aligned inputs are passed without a copy, others through a buffer reused across runs."""
    for batch in (3, 5, 3):  # a new batch size needs a new buffer
        x = _x(batch)
        expected = np.maximum(x @ (np.arange(16, dtype=np.float32).reshape(4, 4) / 16), 0)
        read_only = _placed(x, 0)
        read_only.flags.writeable = False
        for feed in (_placed(x, 0), _placed(x, 4), read_only):
            np.testing.assert_allclose(dynamic.run(None, {"x": feed})[0], expected, rtol=1e-5, atol=1e-5)
        assert np.array_equal(read_only, x)


def test_threads_can_run_one_model_at_once(dynamic):
    """As an ONNX Runtime session: each thread gets its own VM (one VM shared segfaulted)."""
    feeds = [{"x": _x(batch)} for batch in (1, 2, 5, 8)]
    expected = [dynamic.run(None, feed)[0] for feed in feeds]
    failures = []

    def work(start):
        for step in range(200):
            index = (start + step) % len(feeds)
            if not np.array_equal(dynamic.run(None, feeds[index])[0], expected[index]):
                failures.append(index)

    threads = [threading.Thread(target=work, args=(start,)) for start in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []


def test_static_input_shapes_reject_other_batches():
    model = tvm_fuse.build(tiny_model(), AVX512_TARGET, input_shapes={"x": (2, 4)})
    assert model.get_inputs()[0].shape == (2, 4)
    model.run(None, {"x": _x(2)})
    with pytest.raises(InputError, match="axis 0 must be 2"):
        model.run(None, {"x": _x(3)})


def test_benchmark_reports_percentiles(dynamic):
    latency = dynamic.benchmark({"x": _x()}, warmup=1, repeat=5, num_threads=1)
    assert latency.runs == 5
    assert 0 < latency.min_ms <= latency.median_ms <= latency.p90_ms <= latency.p99_ms


def test_export_and_load_without_the_onnx_file(dynamic, tmp_path):
    path = dynamic.export(tmp_path / "tiny.so")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tiny.json", "tiny.so", "tiny.weights"]
    loaded = tvm_fuse.load(path)
    assert loaded.get_inputs() == dynamic.get_inputs()
    assert loaded.get_outputs() == dynamic.get_outputs()
    feed = {"x": _x(5)}
    np.testing.assert_array_equal(loaded.run(None, feed)[0], dynamic.run(None, feed)[0])


def test_interrupted_export_leaves_no_file(dynamic, tmp_path, monkeypatch):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr("tvm_fuse.artifact.json.dumps", interrupted)
    with pytest.raises(KeyboardInterrupt):
        dynamic.export(tmp_path / "model.so")
    assert list(tmp_path.iterdir()) == []


def test_interrupted_export_keeps_the_previous_export(dynamic, tmp_path, monkeypatch):
    path = dynamic.export(tmp_path / "model.so")
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    monkeypatch.setattr("tvm_fuse.artifact.os.replace", lambda *a: (_ for _ in ()).throw(KeyboardInterrupt()))
    with pytest.raises(KeyboardInterrupt):
        dynamic.export(path)
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before


def test_load_refuses_mismatched_or_missing_metadata(dynamic, tmp_path):
    path = dynamic.export(tmp_path / "model.so")
    meta = tmp_path / "model.json"
    record = json.loads(meta.read_text())
    record["library_sha256"] = "0" * 64
    meta.write_text(json.dumps(record))
    with pytest.raises(ExportError, match="does not match its metadata"):
        tvm_fuse.load(path)
    meta.write_text("{not json")
    with pytest.raises(ExportError, match="cannot read the metadata"):
        tvm_fuse.load(path)
    meta.unlink()
    with pytest.raises(ExportError, match="no metadata file"):
        tvm_fuse.load(path)
    with pytest.raises(ExportError, match="no exported model"):
        tvm_fuse.load(tmp_path / "other.so")


def test_load_refuses_weights_from_another_export_or_none(dynamic, tmp_path):
    path = dynamic.export(tmp_path / "model.so")
    weights = tmp_path / "model.weights"
    data = bytearray(weights.read_bytes())
    data[0] ^= 1
    weights.write_bytes(data)
    with pytest.raises(ExportError, match="model.weights does not match its metadata"):
        tvm_fuse.load(path)
    weights.unlink()
    with pytest.raises(ExportError, match="no file .*model.weights"):
        tvm_fuse.load(path)


def test_an_export_of_format_1_with_its_weights_inside_the_library_loads(tmp_path, monkeypatch):
    monkeypatch.setattr("tvm_fuse.pipeline.weights_apart", lambda mod: (mod, []))
    model = tvm_fuse.build(tiny_model(), AVX512_TARGET)
    path = model.export(tmp_path / "model.so")
    meta = tmp_path / "model.json"
    record = json.loads(meta.read_text())
    del record["weights"]
    meta.write_text(json.dumps({**record, "format_version": 1}))
    (tmp_path / "model.weights").unlink()
    feed = {"x": _x(3)}
    np.testing.assert_array_equal(tvm_fuse.load(path).run(None, feed)[0], model.run(None, feed)[0])


def test_export_to_a_missing_directory_fails_cleanly(dynamic, tmp_path):
    with pytest.raises(ExportError, match="does not exist"):
        dynamic.export(tmp_path / "no" / "such" / "dir.so")


def test_assembly_is_the_x86_text_of_every_kernel(dynamic):
    text = dynamic.assembly()
    assert ".text" in text and "__tvm_ffi_dense_relu" in text


def test_a_model_compiled_for_features_the_host_lacks_refuses_to_run(monkeypatch):
    model = tvm_fuse.build(tiny_model(), AVX512_TARGET)
    monkeypatch.setattr("tvm_fuse.target.host_features", lambda: frozenset({"avx2", "fma"}))
    with pytest.raises(tvm_fuse.TvmFuseError, match="this CPU lacks them"):
        model.run(None, {"x": _x()})


def _amx_model(tmp_path):
    """The int8 residual block for this host's CPU with AMX added (real tile instructions),
    its export reloaded, and the input."""
    target = f"llvm -mcpu={host_cpu()} -mattr=+amx-tile,+amx-int8,+amx-bf16"
    model = tvm_fuse.build(residual_block(), target, quantize=tvm_fuse.QuantConfig(calibration=TABLE))
    x = np.random.default_rng(0).standard_normal((1, 32, 16, 16)).astype(np.float32)
    return model, tvm_fuse.load(model.export(tmp_path / "amx.so")), x


@pytest.mark.vnni
def test_where_the_os_denies_amx_a_model_runs_its_build_without_amx(monkeypatch, tmp_path):
    model, loaded, x = _amx_model(tmp_path)
    assert model.uses_amx and model.fallback is not None and not model.fallback.uses_amx
    assert "amx" not in model.fallback.features and loaded.fallback is not None
    native = tvm_fuse.build(residual_block(), "native", quantize=tvm_fuse.QuantConfig(calibration=TABLE))
    (vnni,) = native.run(None, {"x": x})
    monkeypatch.setattr("tvm_fuse.compiled_model.amx_permitted", lambda: False)
    for session in (model, loaded):
        with pytest.warns(UserWarning, match="may not run AMX.*running its build without AMX"):
            (y,) = session.run(None, {"x": x})
        np.testing.assert_array_equal(y, vnni)  # the same int8 kernels, on VNNI


def test_an_amx_build_compiles_its_build_without_amx_once_and_only_when_asked(monkeypatch):
    from tvm_fuse import api

    compiles, compile_ = [], api._compile
    monkeypatch.setattr(api, "_compile", lambda *a, **k: compiles.append(1) or compile_(*a, **k))
    target = f"llvm -mcpu={host_cpu()} -mattr=+amx-tile,+amx-int8,+amx-bf16"
    model = tvm_fuse.build(residual_block(), target, quantize=tvm_fuse.QuantConfig(calibration=TABLE))
    assert model.uses_amx and len(compiles) == 1
    assert model.fallback is not None and model.fallback is model.fallback and len(compiles) == 2


def test_a_model_on_amx_tiles_without_its_fallback_refuses_to_run_where_the_os_denies_amx(monkeypatch, tmp_path):
    model, _, x = _amx_model(tmp_path)
    model.fallback = None  # as an export from before models carried one
    monkeypatch.setattr("tvm_fuse.compiled_model.amx_permitted", lambda: False)
    with pytest.raises(tvm_fuse.TvmFuseError, match="kernels on AMX tiles.*may not run AMX"):
        model.run(None, {"x": x})


def test_an_export_missing_its_build_without_amx_is_refused(tmp_path):
    model, _, _ = _amx_model(tmp_path)
    (tmp_path / "amx.noamx.so").unlink()
    with pytest.raises(ExportError, match="amx.noamx.so"):
        tvm_fuse.load(tmp_path / "amx.so")


def test_a_model_without_tiles_says_so():
    assert not tvm_fuse.build(tiny_model(), AVX512_TARGET).metadata()["uses_amx"]


def test_out_of_range_token_ids_are_refused_not_read_out_of_bounds():
    from onnx import TensorProto, helper, numpy_helper

    table = numpy_helper.from_array(np.arange(20, dtype=np.float32).reshape(10, 2), "table")
    graph = helper.make_graph(
        [helper.make_node("Gather", ["table", "ids"], ["y"], name="embedding")],
        "lookup",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, ["batch", 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 3, 2])],
        [table],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    compiled = tvm_fuse.build(model, AVX512_TARGET)
    assert compiled.get_inputs()[0].index_limit == 10
    ids = np.array([[0, 9, -10]], np.int64)
    assert_close(compiled.run(None, {"ids": ids}), ort_outputs(model, {"ids": ids}))
    with pytest.raises(InputError, match=r"table of 10 rows.*\[-10, 9\]"):
        compiled.run(None, {"ids": np.array([[0, 1, 10]], np.int64)})
