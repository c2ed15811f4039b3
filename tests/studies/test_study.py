"""The study runner: study files that parse into valid recipes, and the seed-aware report."""

import json
import subprocess
import sys

import pandas as pd
import pytest
import yaml
from conftest import REPO_ROOT
from study import (
    Study,
    first_and_last_terms,
    read_results,
    run_study,
    seed_noise,
    summarise,
    summary_table,
    variant_arguments,
)

from metricbert_trainer.metricbert.config import MetricBertConfig
from metricbert_trainer.metricbert.losses import build_loss
from metricbert_trainer.recobert import RecoBertConfig

# Every study file shipped under recipes/: the YAML files that define variants.
STUDIES = sorted(
    str(path.relative_to(REPO_ROOT))
    for path in (REPO_ROOT / "recipes").glob("*/*.yaml")
    if "variants" in yaml.safe_load(path.read_text(encoding="utf-8"))
)


@pytest.mark.parametrize("study_file", STUDIES)
def test_every_variant_is_a_valid_recipe(study_file, tmp_path, monkeypatch):
    monkeypatch.chdir(REPO_ROOT)  # studies name their base configs and data from the repository root
    study = Study.from_yaml(REPO_ROOT / study_file)
    for name, overrides in study.variants.items():
        _, _, training = variant_arguments(study, name, 0, tmp_path)
        for key, value in overrides.items():
            if value is not None and hasattr(training, key):
                assert str(getattr(training, key)).lower().endswith(str(value).lower()), (name, key)
        if study.family == "metricbert":
            build_loss(training)


def test_the_ner_study_is_a_study_file_with_the_ner_familys_metrics():
    study = Study.from_yaml(REPO_ROOT / "recipes/wines/ner_study.yaml")
    assert study.family == "ner" and "f1" in study.metrics and "mpr" not in study.metrics
    assert "recipes/wines/ner_study.yaml" in STUDIES
    with pytest.raises(ValueError, match="zero-shot variant ranks the starting encoder"):
        Study("recipes/wines/ner.yaml", {"zero_shot": {}}, family="ner")


def test_ablation_covers_the_papers_table_and_the_related_objectives():
    study = Study.from_yaml(REPO_ROOT / "recipes/wines/ablation.yaml")
    objectives = {overrides.get("objective", "triplet") for overrides in study.variants.values()}
    assert objectives == {"triplet", "contrastive", "cosine", "mnrl", "logistic_triplet"}
    assert {"random_mining", "cosine_distance", "with_mlm", "euclidean_triplet"} <= set(study.variants)


def test_every_study_names_a_results_file_of_the_repository():
    for study_file in STUDIES:
        study = Study.from_yaml(REPO_ROOT / study_file)
        assert study.results and (REPO_ROOT / study.results).is_file(), study_file


def test_a_study_trains_the_family_it_names(tmp_path, monkeypatch):
    monkeypatch.chdir(REPO_ROOT)
    recobert = Study("recipes/wines/recobert.yaml", {"shorter": {"max_length": 64}}, family="recobert")
    _, _, training = variant_arguments(recobert, "shorter", 0, tmp_path)
    assert type(training) is RecoBertConfig and training.max_length == 64
    _, _, training = variant_arguments(Study("recipes/wines/minilm.yaml", {"a": {}}), "a", 0, tmp_path)
    assert type(training) is MetricBertConfig
    with pytest.raises(ValueError, match="Unknown study family 'tagger'"):
        Study("recipes/wines/minilm.yaml", {"a": {}}, family="tagger")


def test_the_study_script_reports_a_study_from_its_own_results_file():
    command = [
        sys.executable,
        "studies/study.py",
        "recipes/wines/ablation.yaml",
        "--report",
        "--reference",
        "metricbert",
    ]
    result = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout == (REPO_ROOT / "docs/ablation/table2.md").read_text(encoding="utf-8")


def test_gradient_norms_are_kept_from_the_last_logging_step_that_has_them():
    """The run's closing summary averages the loss terms but logs no gradient norms."""
    history = [
        {
            "step": 10,
            "loss": 2.0,
            "mlm_loss": 6.8,
            "triplet_loss": 0.15,
            "grad_norm_mlm": 1.2,
            "grad_norm_triplet": 0.6,
        },
        {
            "step": 20,
            "loss": 6.0,
            "mlm_loss": 6.1,
            "triplet_loss": 0.12,
            "grad_norm_mlm": 4.5,
            "grad_norm_triplet": 0.3,
        },
        {"step": 20, "train_loss": 5.0, "mlm_loss": 6.4, "triplet_loss": 0.13},
    ]
    assert first_and_last_terms(history) == {
        "mlm_loss": [6.8, 6.1],
        "triplet_loss": [0.15, 0.12],
        "grad_norm_mlm": [1.2, 4.5],
        "grad_norm_triplet": [0.6, 0.3],
    }
    without_norms = [
        {key: value for key, value in entry.items() if "grad_norm" not in key} for entry in history
    ]
    assert first_and_last_terms(without_norms) == {"mlm_loss": [6.8, 6.4], "triplet_loss": [0.15, 0.13]}


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
    table = summary_table(summary, reference="full").splitlines()
    assert table[2].startswith("| full | 2 | 93.10 (range 0.20) |")
    # other: MPR +0.05 is inside the 0.2 seed range, HR@100 +2.5 is outside the 1.0 range.
    assert "[+0.05]" in table[3] and "[+2.50*]" in table[3] and "distance=cosine" in table[3]
    assert "[-3.10*]" in table[4]


def test_study_tables_escape_variant_names(tmp_path):
    """A variant's name is the study author's YAML key: it reaches the markdown report as text."""
    from markdown_it import MarkdownIt

    name = "<img src=x onerror=alert(1)> *new* [x](https://evil.example)"
    results = tmp_path / "results.jsonl"
    results.write_text(json.dumps(_row(name, 42, 93.0, 42.0)) + "\n", encoding="utf-8")
    summary = summarise(read_results(results), Study("base.yaml", {name: {}}))
    html = MarkdownIt("commonmark").enable("table").render(summary_table(summary))
    assert "<img" not in html and "<em>" not in html and "<a " not in html
    assert "&lt;img src=x onerror=alert(1)&gt; *new* [x](https://evil.example)" in html


def test_selection_table_shows_what_each_label_free_signal_picks():
    from study import selection_table

    def evaluation(step, t2d, agreement, map_):
        return {
            "step": step,
            "lf_t2d_mrr": t2d,
            "lf_start_agreement@10": agreement,
            "map": map_,
            "mpr": 90.0 + step / 100,
            "hr@100": 40.0,
        }

    row = {
        "variant": "curve",
        "seed": 42,
        "evaluations": [
            evaluation(0, 20.0, 100.0, 18.0),
            evaluation(40, 30.0, 92.0, 19.5),
            evaluation(80, 35.0, 83.0, 19.0),
        ],
    }
    table = selection_table([row, {"variant": "once", "seed": 1, "evaluations": []}]).splitlines()
    picked = {line.split(" | ")[1]: line.split(" | ")[2] for line in table[2:]}
    assert picked == {
        "start": "0",
        "last": "80",
        "annotations (MAP, oracle)": "40",
        "annotations (MPR, oracle)": "80",
        "annotations (HR@100, oracle)": "0",
        "lf_t2d_mrr": "80",
        "lf_start_agreement@10": "40",
    }
    assert not any("once" in line for line in table)


def _small_catalog_with_annotations(wines_csv, folder):
    """200 wines and 10 seeds, each annotated with the 5 items that follow it (enough to rank)."""
    frame = pd.read_csv(wines_csv, dtype=str, nrows=200)[["id", "title", "description"]]
    frame.to_csv(folder / "catalog.csv", index=False)
    pairs = [
        {"seed_id": frame.id[seed], "recommended_id": frame.id[seed + offset]}
        for seed in range(0, 200, 20)
        for offset in range(1, 6)
    ]
    pd.DataFrame(pairs).to_csv(folder / "annotations.csv", index=False)
    return folder / "catalog.csv", folder / "annotations.csv"


def test_variants_that_differ_only_in_the_blend_share_one_training_run(tmp_path, tiny_model_path, wines_csv):
    """The plain variant and two blends come from one training: the rows share its loss terms and
    each ranks differently; a variant with another loss setting trains on its own."""
    catalog, annotations = _small_catalog_with_annotations(wines_csv, tmp_path)
    base = tmp_path / "base.yaml"
    base.write_text(
        json.dumps(
            {
                "model_name_or_path": tiny_model_path,
                "catalog": str(catalog),
                "annotations": str(annotations),
                "text_columns": ["title", "description"],
                "max_train_items": 64,
                "max_steps": 3,
                "learning_rate": 5e-3,
                "per_device_train_batch_size": 16,
                "per_device_eval_batch_size": 64,
                "max_length": 32,
                "selection_holdout": 0,
                "report_to": "none",
                "use_cpu": True,
                "bf16": False,
            }
        ),
        encoding="utf-8",
    )
    study_path = tmp_path / "study.yaml"
    study_path.write_text(
        f"base_config: {base}\n"
        "variants:\n"
        "  plain: {distill_weight: 0.0}\n"
        "  blend_half: {distill_weight: 0.0, trained_weight_share: 0.5}\n"
        "  blend_tenth: {distill_weight: 0.0, trained_weight_share: 0.1}\n"
        "  guarded: {distill_weight: 1.0}\n",
        encoding="utf-8",
    )
    results = tmp_path / "results.jsonl"
    run_study(Study.from_yaml(study_path), ["plain", "blend_half", "blend_tenth", "guarded"], [0], results)

    rows = {row["variant"]: row for row in read_results(results)}
    assert rows["plain"]["trained_with"] == ["plain", "blend_half", "blend_tenth"]
    assert rows["guarded"]["trained_with"] == ["guarded"]
    assert rows["blend_half"]["terms"] == rows["plain"]["terms"]
    mprs = {name: rows[name]["metrics"]["mpr"] for name in ("plain", "blend_half", "blend_tenth")}
    assert len(set(mprs.values())) == 3, mprs


def test_the_study_runner_trains_a_ner_variant_and_reports_its_spread_as_std(tmp_path, tiny_model_path):
    """The one study runner serves the NER family: a real run of the recipe (tiny model), its
    row holds the tagging metrics and every evaluation, and the report shows mean ± std."""
    base = tmp_path / "ner.yaml"
    config = yaml.safe_load((REPO_ROOT / "recipes/wines/ner.yaml").read_text(encoding="utf-8"))
    config.update(
        model_name_or_path=tiny_model_path,
        tagged_catalog=str(REPO_ROOT / "data/wines_ner/wine-titles-ner.jsonl"),
        max_train_items=32,
        max_steps=2,
        per_device_train_batch_size=16,
        max_length=32,
        use_cpu=True,
    )
    base.write_text(yaml.safe_dump(config), encoding="utf-8")
    study = Study(str(base), {"alone": {"metric_weight": 0}, "joint": {}}, family="ner", spread="std")
    results = tmp_path / "results.jsonl"
    run_study(study, ["alone", "joint"], [1, 2], results)
    rows = read_results(results)
    assert [(row["variant"], row["seed"]) for row in rows] == [
        ("alone", 1),
        ("alone", 2),
        ("joint", 1),
        ("joint", 2),
    ]
    assert set(rows[0]["metrics"]) == set(study.metrics)
    assert "logistic_triplet_loss" in rows[2]["terms"] and "logistic_triplet_loss" not in rows[0]["terms"]
    table = summary_table(summarise(rows, study), spread="std", names=study.trainer_class.card_method.metrics)
    assert "| F1 |" in table and " ± " in table and "range" not in table
