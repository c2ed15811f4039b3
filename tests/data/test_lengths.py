"""max_length chosen from the catalog's token lengths."""

import numpy as np
import pytest
from conftest import bare_config

from metricbert_trainer.data.lengths import data_driven_max_length, resolve_max_length, token_lengths


def _texts(words: list[int]) -> list[str]:
    return [" ".join(["wine"] * count) for count in words]  # one token a word, plus [CLS] and [SEP]


def test_the_percentile_of_the_longest_field_rounded_up_to_a_multiple_of_eight(tokenizer):
    fields = {"title": _texts([3] * 20), "description": _texts(list(range(1, 101)))}
    assert list(token_lengths(tokenizer, fields["title"])) == [5] * 20
    expected_p95 = np.percentile(np.arange(1, 101) + 2, 95)  # 97.05 tokens
    assert 96 < expected_p95 <= 104
    assert data_driven_max_length(tokenizer, fields, percentile=95, cap=256) == 104
    assert data_driven_max_length(tokenizer, fields, percentile=50, cap=256) == 56  # 52.5 -> 56
    assert data_driven_max_length(tokenizer, fields, percentile=95, cap=64) == 64


def test_a_large_field_is_measured_on_a_fixed_sample_of_its_texts(tokenizer, monkeypatch, caplog):
    """Every process of a run counted every text's tokens to choose max_length (116 s per two
    million texts, in each process); a field larger than ``LENGTHS_SAMPLED`` is measured on a sample
    of that many, the same sample in every process and every call."""
    import logging

    from metricbert_trainer.data import lengths

    monkeypatch.setattr(lengths, "LENGTHS_SAMPLED", 50)
    sampled = lengths.length_sample(list(range(2000)), 50)
    assert len(set(sampled)) == 50 and list(sampled) == sorted(sampled)
    assert lengths.length_sample(list(range(2000)), 50) == sampled
    # Long texts at the 50 sampled rows alone: the whole field's 95th percentile is a short text's.
    words = [100 if row in set(sampled) else 3 for row in range(2000)]
    assert np.percentile(token_lengths(tokenizer, _texts(words)), 95) == 5
    fields = {"title": _texts([2] * 10), "description": _texts(words)}
    with caplog.at_level(logging.INFO, logger="metricbert_trainer.data.lengths"):
        assert data_driven_max_length(tokenizer, fields, percentile=95, cap=256) == 104  # 102 -> 104
    assert "description from a sample of 50 texts" in caplog.text and "title from" not in caplog.text


def test_lengths_counted_a_chunk_at_a_time_are_the_whole_catalogs(tokenizer, monkeypatch):
    """Token lengths, and the encoding's longest-first order, tokenize a catalog a chunk at a time
    (a fast tokenizer's encodings of a million texts at once do not fit in memory) and give what
    tokenizing every text at once gives."""
    from metricbert_trainer.data import lengths
    from metricbert_trainer.evaluation.encoding import longest_first

    monkeypatch.setattr(lengths, "TOKENIZING_CHUNK", 7)
    texts = _texts([(index * 37) % 150 + 1 for index in range(40)])  # 40 texts, several over 128 tokens
    whole = [len(ids) for ids in tokenizer(texts)["input_ids"]]
    assert list(token_lengths(tokenizer, texts)) == whole
    truncated = np.minimum(whole, 128)
    expected = sorted(range(len(texts)), key=lambda position: (-truncated[position], position))
    assert list(longest_first(tokenizer, texts, 128)) == expected


def test_unset_max_length_is_resolved_from_the_catalog_and_a_set_one_is_kept(tmp_path, tokenizer):
    rows = {"title": _texts([2, 3]), "description": _texts([30, 40])}
    args = bare_config(output_dir=str(tmp_path), report_to="none", use_cpu=True)
    assert args.max_length is None
    assert resolve_max_length(args, tokenizer, rows, ("title", "description")) == 48  # 41.5 -> 48
    fixed = bare_config(output_dir=str(tmp_path), report_to="none", use_cpu=True, max_length=16)
    assert resolve_max_length(fixed, tokenizer, rows, ("title", "description")) == 16


def test_without_a_catalog_the_cap_bounded_by_the_model_positions(tmp_path, tiny_model_path):
    from metricbert_trainer.base.modeling import load_masked_lm

    args = bare_config(output_dir=str(tmp_path), report_to="none", use_cpu=True)
    # The tiny model has 128 positions; the cap is 256.
    assert (
        resolve_max_length(args, None, None, ("title", "description"), load_masked_lm(tiny_model_path)) == 128
    )


def test_an_explicit_max_length_beyond_the_model_positions_is_a_usage_error(tmp_path, tiny_model_path):
    from metricbert_trainer.base.modeling import load_masked_lm
    from metricbert_trainer.errors import UsageError

    model = load_masked_lm(tiny_model_path)
    args = bare_config(output_dir=str(tmp_path), report_to="none", use_cpu=True, max_length=512)
    with pytest.raises(UsageError, match="max_length 512 is longer than the model's 128 position embeddings"):
        resolve_max_length(args, None, None, ("title", "description"), model)
    args.max_length = 128
    assert resolve_max_length(args, None, None, ("title", "description"), model) == 128


@pytest.mark.parametrize(
    "options", [{"max_length_percentile": 0}, {"max_length_percentile": 101}, {"max_length_cap": 1}]
)
def test_length_options_out_of_range_are_refused(tmp_path, options):
    with pytest.raises(ValueError, match="max_length"):
        bare_config(output_dir=str(tmp_path), report_to="none", use_cpu=True, **options)
