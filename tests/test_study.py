"""The study runner: study files that parse into valid recipes, and the seed-aware report."""

import json

import pytest
from conftest import REPO_ROOT

from metricbert_trainer.arguments import parse_recipe_args
from metricbert_trainer.config import DataArguments, MetricBertConfig, ModelArguments
from metricbert_trainer.losses import build_loss
from metricbert_trainer.study import Study, markdown_table, read_results, seed_noise, summarise

STUDIES = ["recipes/wines/ablation.yaml", "recipes/wines/study.yaml"]


@pytest.mark.parametrize("study_file", STUDIES)
def test_every_variant_is_a_valid_recipe(study_file):
    study = Study.from_yaml(REPO_ROOT / study_file)
    for name, overrides in study.variants.items():
        flags = ["--output_dir", "unused"]
        for key, value in {**study.shared, **overrides}.items():
            flags += [f"--{key}", str(value)]
        _, _, training = parse_recipe_args(
            (ModelArguments, DataArguments, MetricBertConfig),
            flags,
            default_config=REPO_ROOT / study.base_config,
        )
        for key, value in overrides.items():
            assert str(getattr(training, key)).lower().endswith(str(value).lower()), (name, key)
        build_loss(training)


def test_ablation_covers_the_papers_table_and_the_related_objectives():
    study = Study.from_yaml(REPO_ROOT / "recipes/wines/ablation.yaml")
    objectives = {overrides.get("objective", "triplet") for overrides in study.variants.values()}
    assert objectives == {"triplet", "contrastive", "cosine", "mnrl", "logistic_triplet"}
    assert {"random_mining", "cosine_distance", "with_mlm", "euclidean_triplet"} <= set(study.variants)


def test_unknown_study_key_rejected(tmp_path):
    path = tmp_path / "study.yaml"
    path.write_text("base_config: x.yaml\nvariants: {a: {}}\nshard: {}\n", encoding="utf-8")
    with pytest.raises(ValueError, match="unknown study keys \\['shard'\\]"):
        Study.from_yaml(path)


def _row(variant, seed, mpr, hr100):
    return {
        "variant": variant,
        "seed": seed,
        "metrics": {"mpr": mpr, "mrr": 4.0, "hr@10": 10.0, "hr@100": hr100},
    }


def test_report_averages_seeds_and_stars_differences_beyond_seed_spread(tmp_path):
    results = tmp_path / "results.jsonl"
    rows = [
        _row("full", 42, 93.0, 42.0),
        _row("full", 7, 93.2, 43.0),
        _row("other", 42, 93.15, 45.0),
        _row("worse", 42, 90.0, 42.5),
    ]
    results.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    study = Study("base.yaml", {"full": {}, "other": {"distance": "cosine"}, "worse": {}, "never_run": {}})
    summary = summarise(read_results(results), study)
    assert [entry["variant"] for entry in summary] == ["full", "other", "worse"]
    assert summary[0]["mean"]["mpr"] == pytest.approx(93.1) and summary[0]["range"]["mpr"] == pytest.approx(
        0.2
    )
    assert seed_noise(summary)["hr@100"] == pytest.approx(1.0)
    table = markdown_table(summary, reference="full").splitlines()
    assert table[2].startswith("| full | 2 | 93.10 (range 0.20) |")
    # other: MPR +0.05 is inside the 0.2 seed range, HR@100 +2.5 is outside the 1.0 range.
    assert "[+0.05]" in table[3] and "[+2.50*]" in table[3] and "distance=cosine" in table[3]
    assert "[-3.10*]" in table[4]
