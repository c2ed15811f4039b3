"""A catalog field tokenized once: the rows, keys, lengths and counts that every reader before the
first step takes from it are what tokenizing (and padding) the texts themselves gives."""

import numpy as np
import pytest

from metricbert_trainer.data import lengths
from metricbert_trainer.data.catalog import load_catalog
from metricbert_trainer.data.token_rows import TokenRows, id_dtype, token_key
from metricbert_trainer.metricbert.guide import batch_token_keys


@pytest.fixture(scope="module")
def descriptions(wines_csv) -> list[str]:
    """Titles (shorter than 24 tokens) and descriptions (longer) of 15 wines."""
    items = load_catalog(wines_csv).dataset.select(range(15))
    return [str(text) for name in ("title", "description") for text in items[name]]


@pytest.mark.parametrize("max_length", [None, 24])
def test_rows_are_the_tokenizers_ids_across_chunks(tokenizer, descriptions, monkeypatch, max_length):
    monkeypatch.setattr(lengths, "TOKENIZING_CHUNK", 7)  # several chunks, the last one short
    rows = TokenRows.tokenize(tokenizer, descriptions, max_length)
    expected = tokenizer(descriptions, truncation=max_length is not None, max_length=max_length)["input_ids"]
    assert len(rows) == len(descriptions)
    assert rows.ids.dtype == np.uint16  # 2 bytes a token for BERT's 30,522 ids
    assert [rows.row(index).tolist() for index in range(len(rows))] == expected
    assert rows.lengths.tolist() == [len(ids) for ids in expected]
    if max_length is not None:
        assert rows.lengths.max() == max_length and rows.lengths.min() < max_length


def test_ids_take_two_bytes_where_the_vocabulary_fits_and_four_beyond():
    assert id_dtype(30_522) is np.uint16 and id_dtype(65_536) is np.uint16
    assert id_dtype(65_537) is np.int32 and id_dtype(250_002) is np.int32  # XLM-R


def test_keys_are_what_a_padded_batch_of_the_same_texts_gives(tokenizer, descriptions):
    rows = TokenRows.tokenize(tokenizer, descriptions, 24)
    batch = tokenizer(descriptions, truncation=True, max_length=24, padding=True, return_tensors="pt")
    assert rows.keys == batch_token_keys(batch)
    assert len(set(rows.keys)) == len(set(descriptions))
    assert rows.keys[0] == token_key(tokenizer(descriptions[0], truncation=True, max_length=24)["input_ids"])


def test_counts_are_each_rows_token_ids_counted(tokenizer, descriptions):
    rows = TokenRows.tokenize(tokenizer, descriptions, 24)
    counts = rows.counts(len(tokenizer))
    assert counts.shape == (len(descriptions), len(tokenizer))
    expected = np.zeros(counts.shape, dtype=np.float32)
    for index, ids in enumerate(tokenizer(descriptions, truncation=True, max_length=24)["input_ids"]):
        np.add.at(expected[index], ids, 1)
    np.testing.assert_array_equal(counts.toarray(), expected)
    assert counts.has_canonical_format  # one entry per (row, id): its column count is a document frequency
