from __future__ import annotations

import logging
import struct
import zipfile

import numpy as np
import pandas as pd
import pytest
import torch
from transformers import AutoModel, AutoModelForMaskedLM, AutoTokenizer

from metricbert_trainer.data.catalog import load_catalog
from metricbert_trainer.evaluation.embedding_cache import (
    BLOCK_ROWS,
    EarlierVectors,
    embedding_fingerprints,
    text_digests,
)
from metricbert_trainer.evaluation.encoding import (
    encode_catalog,
    encode_texts,
    encode_views,
    inference_session,
)

TEXTS = [
    "Crisp and dry.",
    "Aromas include tropical fruit, broom, brimstone and dried herb, with brisk acidity on a long finish.",
    "Ripe, fruity, smooth and structured.",
    "Tart and snappy, the flavors of lime flesh and rind dominate.",
    "Red.",
]


@pytest.fixture(scope="module")
def tiny(tiny_model_path):
    return AutoModelForMaskedLM.from_pretrained(tiny_model_path), AutoTokenizer.from_pretrained(
        tiny_model_path
    )


@pytest.fixture(scope="module")
def catalog(wines_csv):
    frame = pd.read_csv(wines_csv, dtype=str, nrows=40)[["id", "title", "description"]]
    return load_catalog(frame)


def damage_member(path, member_name: str, offset: int) -> None:
    """Flips the byte ``offset`` bytes into the data of ``member_name`` of the archive at ``path``."""
    with zipfile.ZipFile(path) as archive:
        member = archive.getinfo(member_name)
    data = bytearray(path.read_bytes())
    # The member's local header: 30 bytes, then its name and extra field, whose lengths it holds.
    name_length, extra_length = struct.unpack_from("<HH", data, member.header_offset + 26)
    data[member.header_offset + 30 + name_length + extra_length + offset] ^= 0xFF
    path.write_bytes(bytes(data))


def test_batched_embeddings_equal_one_at_a_time_in_the_original_order(tiny):
    model, tokenizer = tiny
    batched = encode_texts(model, tokenizer, TEXTS, batch_size=3)
    single = np.stack([encode_texts(model, tokenizer, [text])[0] for text in TEXTS])
    assert batched.dtype == np.float32 and batched.shape == (len(TEXTS), model.config.hidden_size)
    np.testing.assert_allclose(batched, single, atol=1e-5)
    reversed_order = encode_texts(model, tokenizer, TEXTS[::-1], batch_size=2)
    np.testing.assert_allclose(reversed_order[::-1], batched, atol=1e-5)
    # Written in the format asked for as each batch comes: the float32 vectors, rounded once.
    halved = encode_texts(model, tokenizer, TEXTS, batch_size=3, dtype=np.float16)
    assert halved.dtype == np.float16 and np.array_equal(halved, batched.astype(np.float16))


def test_embedding_is_the_masked_mean_of_the_last_layer(tiny):
    model, tokenizer = tiny
    model.eval()
    inputs = tokenizer(TEXTS[1], return_tensors="pt")
    with torch.no_grad():
        expected = model.base_model(**inputs).last_hidden_state[0].mean(dim=0).numpy()
    np.testing.assert_allclose(encode_texts(model, tokenizer, [TEXTS[1]])[0], expected, atol=1e-5)


def test_train_and_eval_modes_are_restored(tiny):
    model, tokenizer = tiny
    model.train()
    encode_texts(model, tokenizer, TEXTS[:2])
    assert model.training
    model.eval()
    encode_texts(model, tokenizer, TEXTS[:2])
    assert not model.training


def test_a_prepared_bf16_model_infers_at_the_sessions_precision_and_trains_on_in_bf16(tiny_model_path):
    """accelerate wraps a prepared model's forward in the run's bf16 autocast, and unwrap_model
    keeps the wrapper: an inference pass that calls the model (the tagger's evaluation) must run
    in fp32 on a CPU, as the saved model reloaded would, and leave the wrapper for training."""
    from accelerate import Accelerator
    from accelerate.state import AcceleratorState

    plain = AutoModelForMaskedLM.from_pretrained(tiny_model_path).eval()
    # accelerate keeps one state per process, and a training test run before this one in the same
    # process fixed its precision: this test's bf16 Accelerator needs a state of its own.
    AcceleratorState._reset_state(reset_partial_state=True)
    prepared = Accelerator(cpu=True, mixed_precision="bf16").prepare(
        AutoModelForMaskedLM.from_pretrained(tiny_model_path)
    )
    AcceleratorState._reset_state(reset_partial_state=True)  # and leaves none behind for later tests
    inputs = AutoTokenizer.from_pretrained(tiny_model_path)(TEXTS, padding=True, return_tensors="pt")
    with torch.inference_mode():
        expected = plain(**inputs).logits
        in_bf16 = prepared.eval()(**inputs).logits
    assert not torch.equal(in_bf16, expected)  # the wrapper does run the forward in bf16
    with inference_session(prepared):
        assert torch.equal(prepared(**inputs).logits, expected)
    with torch.inference_mode():
        assert torch.equal(prepared(**inputs).logits, in_bf16)


def test_bare_encoder_and_mlm_checkpoint_give_the_same_vectors(tiny, tiny_model_path):
    model, tokenizer = tiny
    encoder = AutoModel.from_pretrained(tiny_model_path)
    np.testing.assert_allclose(
        encode_texts(encoder, tokenizer, TEXTS), encode_texts(model, tokenizer, TEXTS), atol=1e-5
    )


def test_truncation_and_empty_input(tiny):
    model, tokenizer = tiny
    long_text = " ".join(["tannic"] * 400)
    np.testing.assert_allclose(
        encode_texts(model, tokenizer, [long_text], max_length=16),
        encode_texts(model, tokenizer, [" ".join(["tannic"] * 14)], max_length=16),
        atol=1e-5,
    )
    assert encode_texts(model, tokenizer, []).shape == (0, model.config.hidden_size)


def test_encode_catalog_views(tiny, catalog):
    model, tokenizer = tiny
    per_field = encode_catalog(model, tokenizer, catalog, batch_size=16)
    assert set(per_field) == {"title", "description"}
    np.testing.assert_allclose(
        per_field["title"], encode_texts(model, tokenizer, catalog.texts("title")), atol=1e-5
    )
    concat = encode_catalog(model, tokenizer, catalog, mode="concat", batch_size=16)
    joined = [
        f"{title} {description}"
        for title, description in zip(catalog.texts("title"), catalog.texts("description"), strict=True)
    ]
    np.testing.assert_allclose(concat["concat"], encode_texts(model, tokenizer, joined), atol=1e-5)
    assert list(encode_catalog(model, tokenizer, catalog, mode="description")) == ["description"]


def test_cache_is_reused_until_model_or_settings_change(tiny_model_path, catalog, tmp_path, caplog):
    model = AutoModelForMaskedLM.from_pretrained(tiny_model_path)
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_path)
    cache = tmp_path / "embeddings.npz"
    first = encode_catalog(model, tokenizer, catalog, cache_path=cache)
    written = cache.stat().st_mtime_ns
    with np.load(cache, allow_pickle=False) as stored:  # plain arrays, no pickle
        assert {"fingerprint", "view:title", "view:description"} <= set(stored.files)

    with caplog.at_level(logging.INFO, logger="metricbert_trainer.evaluation.encoding"):
        again = encode_catalog(model, tokenizer, catalog, cache_path=cache)
    assert "Reusing embeddings" in caplog.text
    assert cache.stat().st_mtime_ns == written
    for field in catalog.fields:
        np.testing.assert_array_equal(again[field], first[field])

    # A reloaded copy of the same checkpoint (its unused pooler re-initialised) still hits the cache.
    reloaded = AutoModel.from_pretrained(tiny_model_path)
    np.testing.assert_array_equal(
        encode_catalog(reloaded, tokenizer, catalog, cache_path=cache)["title"], first["title"]
    )
    assert cache.stat().st_mtime_ns == written

    with torch.no_grad():
        model.base_model.embeddings.word_embeddings.weight.add_(0.5)  # as a training step would
    changed = encode_catalog(model, tokenizer, catalog, cache_path=cache)
    assert not np.allclose(changed["title"], first["title"])
    assert cache.stat().st_mtime_ns != written

    rewritten = cache.stat().st_mtime_ns
    encode_catalog(model, tokenizer, catalog, cache_path=cache, max_length=8)
    assert cache.stat().st_mtime_ns != rewritten


def test_bf16_rounds_the_vectors_and_a_cache_says_which_precision_encoded_it(
    tiny_model_path, catalog, tmp_path, caplog
):
    model = AutoModelForMaskedLM.from_pretrained(tiny_model_path)
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_path)
    default = encode_texts(model, tokenizer, TEXTS)
    assert np.array_equal(encode_texts(model, tokenizer, TEXTS, precision="fp32"), default)  # auto on a CPU
    rounded = encode_texts(model, tokenizer, TEXTS, precision="bf16")
    assert rounded.dtype == np.float32 and not np.array_equal(rounded, default)
    cosines = (rounded * default).sum(1) / np.linalg.norm(rounded, axis=1) / np.linalg.norm(default, axis=1)
    assert cosines.min() > 0.99

    # The precision is not in the fingerprint: a cache encoded in bf16 serves an fp32 call, and says so.
    cache = tmp_path / "embeddings.npz"
    written = encode_catalog(model, tokenizer, catalog, cache_path=cache, precision="bf16")
    with np.load(cache, allow_pickle=False) as stored:
        assert str(stored["precision"]) == "bf16"
        older = {name: stored[name] for name in stored.files if name != "precision"}
    with caplog.at_level(logging.INFO, logger="metricbert_trainer.evaluation.encoding"):
        again = encode_catalog(model, tokenizer, catalog, cache_path=cache, precision="fp32")
        assert f"Reusing embeddings from {cache} (encoded in bf16)." in caplog.messages
        np.testing.assert_array_equal(again["title"], written["title"])
        # A cache written before the precision was recorded is read as before.
        np.savez(cache, **older)
        caplog.clear()
        encode_catalog(model, tokenizer, catalog, cache_path=cache)
        assert f"Reusing embeddings from {cache} (precision not recorded)." in caplog.messages
    with pytest.raises(ValueError, match="Unknown precision 'fp16'"):
        encode_texts(model, tokenizer, TEXTS, precision="fp16")


def test_an_update_reads_each_earlier_vector_back_exactly_whatever_the_block(tiny, catalog, tmp_path):
    """The earlier cache's views are read a block of rows at a time, straight into the new
    matrices: each text it holds must come back bit for bit wherever it now sits (another row,
    another view), whether a block holds one row, a few, or the whole view."""
    model, tokenizer = tiny
    earlier_views = {field: catalog.texts(field)[:30] for field in catalog.fields}
    cache = tmp_path / "embeddings.npz"
    earlier = encode_views(model, tokenizer, earlier_views, cache_path=cache)
    vector_of = {
        text: earlier[field][row] for field, texts in earlier_views.items() for row, text in enumerate(texts)
    }
    titles, descriptions = earlier_views["title"], earlier_views["description"]
    new_texts = ["A wine no cache has seen.", "Nor this one."]
    views = {  # reordered, some items gone, a title now a description, repeats, new texts
        "title": [new_texts[0], *titles[25:2:-3], descriptions[4], titles[5], titles[5]],
        "description": [*descriptions[::-2], new_texts[1], new_texts[0]],
    }
    digests = {name: text_digests(texts) for name, texts in views.items()}
    model_fingerprint = embedding_fingerprints(model, tokenizer, views, max_length=128)[1]
    asked = []

    def encode(texts):
        asked.append(texts)
        return encode_texts(model, tokenizer, texts)

    results = []
    for block_rows in (1, 7, BLOCK_ROWS):
        stored = EarlierVectors.read(cache, model_fingerprint)
        missing = stored.missing(views, digests)
        matrices, precision = stored.updated(views, digests, missing, encode, "fp32", block_rows=block_rows)
        assert asked.pop() == new_texts and precision == "fp32"
        results.append(matrices)
    fresh = dict(zip(new_texts, encode_texts(model, tokenizer, new_texts), strict=True))
    for name, texts in views.items():
        for row, text in enumerate(texts):
            np.testing.assert_array_equal(results[0][name][row], vector_of.get(text, fresh.get(text)))
        for other in results[1:]:
            np.testing.assert_array_equal(other[name], results[0][name])


def test_an_update_whose_earlier_vectors_are_damaged_encodes_every_text(tiny, wines_csv, tmp_path, caplog):
    """The earlier vectors are read while the update runs, not before: a view damaged on disk
    (found by its CRC once read to its end) must still end in every text encoded and a sound cache.
    The views are larger than the 4 KiB the archive reads with their headers, whose CRC would
    otherwise be checked, and fail, before the update starts."""
    model, tokenizer = tiny
    catalog = load_catalog(pd.read_csv(wines_csv, dtype=str, nrows=120)[["id", "title", "description"]])
    cache = tmp_path / "embeddings.npz"
    earlier = {field: catalog.texts(field)[:100] for field in catalog.fields}
    encode_views(model, tokenizer, earlier, cache_path=cache)
    damage_member(cache, "view:title.npy", 8000)  # past the first 4 KiB
    views = {field: catalog.texts(field) for field in catalog.fields}
    with caplog.at_level(logging.INFO, logger="metricbert_trainer.evaluation"):
        updated = encode_views(model, tokenizer, views, cache_path=cache)
        assert any(
            message.startswith(f"Cannot read the embedding cache {cache} back") for message in caplog.messages
        )
        again = encode_views(model, tokenizer, views, cache_path=cache)
        assert any(message.startswith(f"Reusing embeddings from {cache}") for message in caplog.messages)
    alone = encode_views(model, tokenizer, views)
    for field in views:
        # The update kept the texts it encoded before the damage showed (encoding_progress), read
        # back now: encoded in other batches, they round differently in the last bits.
        np.testing.assert_allclose(updated[field], alone[field], rtol=0, atol=1e-6)
        np.testing.assert_array_equal(again[field], updated[field])


@pytest.mark.parametrize("cache_only", [False, True])
def test_a_damaged_cache_that_matches_is_encoded_again_not_a_crash(
    tiny, wines_csv, tmp_path, caplog, cache_only
):
    """A view damaged on disk fails its CRC once read to its end, which raised ``BadZipFile`` out of
    ``evaluate``, ``recommend`` and ``encode`` where the cache matched the catalog. It is now said,
    and the catalog encoded and written again; ``cache_only`` (``metricbert encode``), which reads
    a matching cache through without keeping it, finds the damage too, and returns nothing."""
    model, tokenizer = tiny
    catalog = load_catalog(pd.read_csv(wines_csv, dtype=str, nrows=120)[["id", "title", "description"]])
    views = {field: catalog.texts(field) for field in catalog.fields}
    cache = tmp_path / "embeddings.npz"
    alone = encode_views(model, tokenizer, views, cache_path=cache)
    damage_member(cache, "view:description.npy", 8000)  # past the 4 KiB read with the header
    with caplog.at_level(logging.INFO, logger="metricbert_trainer.evaluation"):
        again = encode_views(model, tokenizer, views, cache_path=cache, cache_only=cache_only)
        assert any(
            message.startswith(f"Cannot read the embedding cache {cache}") for message in caplog.messages
        )
        assert (again is None) == cache_only
        caplog.clear()
        reread = encode_views(model, tokenizer, views, cache_path=cache)
        assert any(message.startswith(f"Reusing embeddings from {cache}") for message in caplog.messages)
    for field in views:
        np.testing.assert_array_equal(reread[field], alone[field])


def test_only_the_cache_is_written_and_a_matching_one_is_left_alone(tiny, catalog, tmp_path, caplog):
    """``cache_only`` writes the cache an ordinary call writes, returns nothing, and leaves a
    matching cache as it is."""
    model, tokenizer = tiny
    ordinary, only = tmp_path / "ordinary.npz", tmp_path / "only.npz"
    encode_catalog(model, tokenizer, catalog, cache_path=ordinary)
    assert encode_catalog(model, tokenizer, catalog, cache_path=only, cache_only=True) is None
    with np.load(ordinary) as expected, np.load(only) as written:
        assert sorted(expected.files) == sorted(written.files)
        for name in expected.files:
            np.testing.assert_array_equal(written[name], expected[name])
    written_at = only.stat().st_mtime_ns
    with caplog.at_level(logging.INFO, logger="metricbert_trainer.evaluation"):
        assert encode_catalog(model, tokenizer, catalog, cache_path=only, cache_only=True) is None
    assert any(message.startswith(f"Reusing embeddings from {only}") for message in caplog.messages)
    assert only.stat().st_mtime_ns == written_at
    with pytest.raises(ValueError, match="cache_path"):
        encode_catalog(model, tokenizer, catalog, cache_only=True)


def test_a_changed_catalog_encodes_only_the_texts_its_cache_lacks(
    tiny_model_path, wines_csv, tmp_path, caplog
):
    model = AutoModelForMaskedLM.from_pretrained(tiny_model_path)
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_path)
    frame = pd.read_csv(wines_csv, dtype=str, nrows=40)[["id", "title", "description"]]
    earlier, grown = load_catalog(frame.iloc[:30]), load_catalog(frame)
    cache = tmp_path / "embeddings.npz"
    encode_catalog(model, tokenizer, earlier, cache_path=cache)
    encoded_rows = []
    hook = model.base_model.embeddings.register_forward_hook(
        lambda module, inputs, output: encoded_rows.append(output.shape[0])
    )
    try:
        with caplog.at_level(logging.INFO, logger="metricbert_trainer.evaluation"):
            updated = encode_catalog(model, tokenizer, grown, cache_path=cache)
            new_texts = {text for field in grown.fields for text in grown.texts(field)} - {
                text for field in earlier.fields for text in earlier.texts(field)
            }
            assert sum(encoded_rows) == len(new_texts) > 0  # the ten new items' texts, nothing else
            assert (
                f"Updating the embeddings of {cache}: {80 - len(new_texts)} of 80 texts read back, "
                f"{len(new_texts)} distinct texts encoded." in caplog.messages
            )
            # The cache now holds the grown catalog, read back whole by the next call.
            encoded_rows.clear()
            again = encode_catalog(model, tokenizer, grown, cache_path=cache)
            assert not encoded_rows and any(
                message.startswith(f"Reusing embeddings from {cache}") for message in caplog.messages
            )
            # Another max_length is another setting: every text encoded again.
            encode_catalog(model, tokenizer, grown, cache_path=cache, max_length=8)
            assert sum(encoded_rows) == len({text for field in grown.fields for text in grown.texts(field)})
    finally:
        hook.remove()
    alone = encode_catalog(model, tokenizer, grown)
    for field in grown.fields:
        np.testing.assert_allclose(updated[field], alone[field], atol=1e-5)
        np.testing.assert_array_equal(again[field], updated[field])
