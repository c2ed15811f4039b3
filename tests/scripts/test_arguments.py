import re

import pytest
import yaml
from conftest import REPO_ROOT

from metricbert_trainer.metricbert.config import MetricBertConfig
from metricbert_trainer.metricbert.losses import LogisticTripletLoss, TripletLoss, build_loss
from metricbert_trainer.metricbert.losses.mining import Mining
from metricbert_trainer.ner.config import NerConfig
from metricbert_trainer.recobert import RecoBertConfig
from metricbert_trainer.scripts.arguments import DataArguments, ModelArguments, parse_recipe_args
from metricbert_trainer.scripts.ner import NerDataArguments
from metricbert_trainer.training.config import (
    bf16_pays_on,
    cpu_identity,
    cpuinfo_fields,
    launched_without_accelerator,
)

TYPES = (ModelArguments, DataArguments, MetricBertConfig)


def _write(tmp_path, text):
    path = tmp_path / "recipe.yaml"
    path.write_text(text, encoding="utf-8")
    return str(path)


def test_yaml_values_and_cli_overrides(tmp_path):
    config = _write(
        tmp_path,
        "catalog: items.csv\noutput_dir: out\nlearning_rate: 1.0e-5\nmining: random\ntext_columns: [name, text]\n",
    )
    model, data, training = parse_recipe_args(
        TYPES, ["--config", config, "--learning_rate", "3e-5", "--margin", "0.3"]
    )
    assert training.learning_rate == 3e-5 and training.margin == 0.3
    assert training.mining is Mining.RANDOM
    assert data.text_columns == ["name", "text"] and data.catalog == "items.csv"
    assert model.trust_remote_code is False


def test_default_config_used_without_flag(tmp_path):
    config = _write(tmp_path, "catalog: items.csv\noutput_dir: out\nmax_length: 64\n")
    _, _, training = parse_recipe_args(TYPES, [], default_config=config)
    assert training.max_length == 64


def test_several_report_to_integrations_from_the_yaml_or_the_command_line(tmp_path):
    config = _write(tmp_path, "catalog: items.csv\noutput_dir: out\nreport_to: [tensorboard, wandb]\n")
    _, _, from_yaml = parse_recipe_args(TYPES, ["--config", config])
    _, _, from_flags = parse_recipe_args(TYPES, ["--config", config, "--report_to", "wandb", "tensorboard"])
    _, _, one = parse_recipe_args(TYPES, ["--config", config, "--report_to", "none"])
    assert from_yaml.report_to == ["tensorboard", "wandb"]
    assert from_flags.report_to == ["wandb", "tensorboard"]
    assert one.report_to == []


def test_unknown_yaml_key_suggests_the_right_one(tmp_path):
    config = _write(tmp_path, "catalog: items.csv\nlearning_rat: 1.0e-5\n")
    with pytest.raises(ValueError, match="'learning_rat' \\(did you mean 'learning_rate'\\?\\)"):
        parse_recipe_args(TYPES, ["--config", config])


@pytest.mark.parametrize(
    ("flag", "value", "message"),
    [
        ("--margin", "-0.1", "margin must be >= 0"),
        ("--triplet_weight", "-1", "must be >= 0"),
        ("--mlm_probability", "1.5", r"mlm_probability must be in \[0, 1\)"),
        ("--mlm_probability", "-0.1", r"mlm_probability must be in \[0, 1\)"),
        ("--mlm_weight", "-1", "mlm_weight must be >= 0"),
        ("--max_length", "1", "max_length must be >= 2"),
    ],
)
def test_invalid_values_rejected_at_parse_time(flag, value, message):
    with pytest.raises(ValueError, match=message):
        parse_recipe_args(TYPES, ["--catalog", "x.csv", "--output_dir", "out", flag, value])


def test_unknown_choice_lists_valid_ones():
    with pytest.raises(ValueError, match="Unknown mining 'hardest'; valid choices: hard, random, semi_hard"):
        MetricBertConfig(output_dir="out", mining="hardest")


def test_unknown_nonfinite_loss_action_lists_valid_ones():
    with pytest.raises(SystemExit):  # argparse's choices: "invalid choice: 'ignore' (choose from stop, skip)"
        parse_recipe_args(TYPES, ["--catalog", "x.csv", "--output_dir", "out", "--nonfinite_loss", "ignore"])
    with pytest.raises(ValueError, match="Unknown nonfinite_loss 'ignore'; valid choices: stop, skip"):
        MetricBertConfig(output_dir="out", nonfinite_loss="ignore")


def test_missing_catalog_says_what_to_pass():
    with pytest.raises(ValueError, match="--catalog"):
        parse_recipe_args(TYPES, ["--output_dir", "out"])


def test_every_loss_option_is_reachable_from_the_yaml_config(tmp_path):
    config = _write(
        tmp_path,
        "catalog: items.csv\noutput_dir: out\n"
        "objective: cosine\npositive_margin: 0.9\nnegative_margin: -0.5\nscale: 10\n"
        "distance: euclidean\nmining: semi_hard\nanchors: title\nnegative_pool: other_field\n"
        "triplet_weight: 0.5\nmlm_weight: 1.0\nmlm_probability: 0.2\npooling_input: unmasked\n"
        "false_negative_filter: false\nfalse_negative_margin: 0.05\ngather_across_devices: false\n"
        "mlm_head_warmup_steps: 50\nmlm_weight_ramp_steps: 10\ndistill_weight: 2.0\ndistill_temperature: 0.1\n"
        "distill_within_field: true\ndistill_weighting: guide_confidence\ndistill_confidence_power: 3.0\n"
        "teacher_weight: 0.5\nteacher_tfidf_weight: 0.3\nteacher_temperature: 0.25\n"
        "teacher_encoder: encoders/all-mpnet-base-v2\nbatch_neighbourhood_size: 4\n"
        "teacher_shared_neighbours: 30\nteacher_shared_neighbour_weight: 0.4\n",
    )
    _, _, training = parse_recipe_args(TYPES, ["--config", config])
    assert {**build_loss(training).get_config_dict(), **training.loss_config()} == {
        "objective": "cosine",
        "distance": "euclidean",
        "mining": "semi_hard",
        "anchors": "title",
        "negative_pool": "other_field",
        "positive_margin": 0.9,
        "negative_margin": -0.5,
        "triplet_weight": 0.5,
        "mlm_weight": 1.0,
        "mlm_probability": 0.2,
        "mlm_head_warmup_steps": 50,
        "mlm_weight_ramp_steps": 10,
        "distill_weight": 2.0,
        "distill_temperature": 0.1,
        "distill_include_positive": False,
        "distill_within_field": True,
        "distill_weighting": "guide_confidence",
        "distill_confidence_power": 3.0,
        "pooling_input": "unmasked",
        "false_negative_filter": False,
        "false_negative_margin": 0.05,
        "gather_across_devices": False,
        "teacher_weight": 0.5,
        "teacher_tfidf_weight": 0.3,
        "teacher_temperature": 0.25,
        "teacher_encoder": "encoders/all-mpnet-base-v2",
        "teacher_shared_neighbours": 30,
        "teacher_shared_neighbour_weight": 0.4,
        "batch_neighbourhood_size": 4,
    }
    # The remaining objectives' own settings, and a CLI flag over the YAML value.
    _, _, training = parse_recipe_args(TYPES, ["--config", config, "--objective", "mnrl", "--mining", "hard"])
    assert build_loss(training).get_config_dict()["scale"] == 10
    _, _, training = parse_recipe_args(
        TYPES, ["--config", config, "--objective", "triplet", "--margin", "0.4"]
    )
    assert isinstance(build_loss(training), TripletLoss) and build_loss(training).margin == 0.4
    _, _, training = parse_recipe_args(TYPES, ["--config", config, "--objective", "logistic_triplet"])
    assert isinstance(build_loss(training), LogisticTripletLoss)


def test_unknown_objective_lists_valid_ones(tmp_path):
    config = _write(tmp_path, "catalog: items.csv\noutput_dir: out\nobjective: infonce\n")
    with pytest.raises(
        ValueError,
        match="Unknown objective 'infonce'; valid choices: triplet, contrastive, cosine, mnrl, logistic_triplet",
    ):
        parse_recipe_args(TYPES, ["--config", config])


def test_objective_settings_checked_before_any_model_loads():
    with pytest.raises(ValueError, match="does not apply to objective mnrl"):
        MetricBertConfig(output_dir="out", objective="mnrl", mining="random")


@pytest.mark.parametrize(
    "config",
    sorted(
        path
        for path in (REPO_ROOT / "recipes").glob("*/*.yaml")
        if "variants" not in yaml.safe_load(path.read_text(encoding="utf-8"))  # study files, read by Study
    ),
    ids=lambda path: f"{path.parent.name}/{path.name}",
)
def test_every_shipped_recipe_config_parses(config):
    config_class = RecoBertConfig if config.name.startswith("recobert") else MetricBertConfig
    # --use_cpu: the GPU configs ask for bf16, which transformers refuses on a GPU-less machine otherwise.
    flags = ["--config", str(config), "--use_cpu", "true"]
    if config.name == "ner.yaml":  # multi-task NER reads tagged titles, not a catalog
        _, data, _ = parse_recipe_args((ModelArguments, NerDataArguments, NerConfig), flags)
        assert (REPO_ROOT / data.tagged_catalog).is_file()
        return
    if config.parent.name != "wines":  # the user's catalog comes from the command line
        flags += ["--catalog", "their/items.csv"]
    model, data, training = parse_recipe_args((ModelArguments, DataArguments, config_class), flags)
    assert model.model_name_or_path
    assert config.parent.name != "wines" or (REPO_ROOT / data.catalog).is_file()
    assert data.annotations is None or (REPO_ROOT / data.annotations).is_file()


@pytest.mark.parametrize("config", ["bert_large.yaml", "roberta_large.yaml"])
def test_large_model_configs_are_sized_for_one_gpu(config):
    _, _, training = parse_recipe_args(
        TYPES, ["--config", f"{REPO_ROOT}/recipes/wines/{config}", "--use_cpu", "true"]
    )
    assert training.bf16 and training.activation_checkpointing and training.max_length == 256
    assert training.gather_across_devices and training.gradient_accumulation_steps == 1


def test_processes_launched_without_an_accelerator_train_on_the_cpu(monkeypatch):
    # The end-to-end check is tests/base/test_distributed.py, whose launches never pass --use_cpu.
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert launched_without_accelerator()
    monkeypatch.setenv("WORLD_SIZE", "1")
    assert not launched_without_accelerator()


def test_a_users_config_says_which_recipe_settings_it_drops(tmp_path, caplog):
    """``--config`` replaces a recipe's YAML whole: the log names the settings that went back to
    the library's defaults (the first evaluation of the starting model), and the values really are
    the defaults."""
    config = _write(tmp_path, "catalog: items.csv\noutput_dir: out\nlearning_rate: 1.0e-5\n")
    recipe = REPO_ROOT / "recipes" / "catalog" / "minilm.yaml"
    with caplog.at_level("WARNING", logger="metricbert_trainer"):
        _, _, training = parse_recipe_args(TYPES, ["--config", config], default_config=recipe)
    (message,) = [
        record.getMessage() for record in caplog.records if "--config replaces" in record.getMessage()
    ]
    assert "eval_on_start (recipe True, now False)" in message and training.eval_on_start is False
    assert not re.search(r"(?<!_)learning_rate \(recipe", message)  # the user's config sets it
    caplog.clear()
    parse_recipe_args(TYPES, ["--learning_rate", "1e-5", "--catalog", "items.csv"], default_config=recipe)
    assert not [record for record in caplog.records if "--config replaces" in record.getMessage()]


def test_cpu_bf16_chooses_bf16_autocast_where_it_was_measured_to_pay():
    """The CPUs measured in benchmarks/RESULTS.md: a Xeon with AMX (bf16 trained 1.39x faster than
    fp32), AMD's Zen 5 (family 26, 2.10x) and Zen 4 (family 25, 1.59x) with AVX512-BF16; a Xeon
    with AVX512-BF16 (and AVX512-FP16) but no AMX trained at 0.75x, and family 25's Zen 3, without
    the flag, and an unmeasured family with it stay in fp32."""
    assert bf16_pays_on(
        {"avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile", "amx_int8"}, "GenuineIntel", 6
    )
    assert not bf16_pays_on({"avx2", "avx512f", "avx512_bf16", "avx512_fp16"}, "GenuineIntel", 6)
    assert bf16_pays_on({"avx2", "avx512f", "avx512_bf16"}, "AuthenticAMD", 26)
    assert bf16_pays_on({"avx2", "avx512f", "avx512_bf16"}, "AuthenticAMD", 25)
    assert not bf16_pays_on({"avx2", "fma"}, "AuthenticAMD", 25)
    assert not bf16_pays_on({"avx2", "avx512f", "avx512_bf16"}, "AuthenticAMD", 27)
    assert not bf16_pays_on({"avx2", "fma"}, "AuthenticAMD", 26)
    assert not bf16_pays_on({"avx2", "fma"})


def test_the_cpus_vendor_and_family_are_read_from_cpuinfo(tmp_path):
    zen5 = tmp_path / "zen5"
    zen5.write_text(
        "processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 26\nmodel\t\t: 2\nmodel name\t: AMD EPYC\n"
        "processor\t: 1\nvendor_id\t: AuthenticAMD\ncpu family\t: 26\n",
        encoding="utf-8",
    )
    arm = tmp_path / "arm"
    arm.write_text(
        "processor\t: 0\nBogoMIPS\t: 243.75\nFeatures\t: fp asimd\nCPU implementer\t: 0x41\n",
        encoding="utf-8",
    )
    assert cpu_identity(cpuinfo_fields(str(zen5))) == ("AuthenticAMD", 26)
    assert cpu_identity(cpuinfo_fields(str(arm))) == ("", 0)
    assert cpu_identity(cpuinfo_fields(str(tmp_path / "missing"))) == ("", 0)


# What a recipe YAML may state that is not MetricBertConfig's: the model, the catalog and its
# evaluation (the runner's dataclasses), where the run writes, and the ranking of the starting
# model before training, which the runner can always do (annotations or the label-free signals).
RUN_SETTINGS = {"output_dir", "eval_on_start"}


def test_the_class_defaults_are_the_recipe_that_train_catalog_trains(tmp_path):
    """``MetricBertConfig(output_dir=...)`` from Python is every setting ``recipes/train_catalog.py``
    trains with: the same dataclass, field for field, once the run's own settings are given."""
    recipe = REPO_ROOT / "recipes" / "catalog" / "minilm.yaml"
    _, _, training = parse_recipe_args(TYPES, ["--catalog", "items.csv"], default_config=recipe)
    stated = yaml.safe_load(recipe.read_text(encoding="utf-8"))
    run = {name: stated[name] for name in RUN_SETTINGS}
    assert training.to_dict() == MetricBertConfig(**run).to_dict()
    assert training.teacher_shared_neighbours == 50 and training.mlm_head_warmup_steps == 100


@pytest.mark.parametrize("recipe", ["catalog/minilm.yaml", "wines/minilm.yaml", "video_games/minilm.yaml"])
def test_a_default_recipe_states_only_what_differs_from_the_class(recipe):
    """The default recipes' YAML files set no training option to the value it has anyway, so a
    default changed in the class is the recipes' too, and nothing restated can drift from it."""
    stated = yaml.safe_load((REPO_ROOT / "recipes" / recipe).read_text(encoding="utf-8"))
    defaults = MetricBertConfig(output_dir="out").to_dict()
    restated = {
        name: value
        for name, value in stated.items()
        if name in defaults and name not in RUN_SETTINGS and value == defaults[name]
    }
    assert restated == {}


def test_a_term_at_weight_zero_leaves_out_what_serves_only_it():
    """One option turns off what the defaults turn on: the MLM term its head's warm-up and ramp, the
    teacher its shared neighbours (which would otherwise be listed over the whole catalog for
    nothing); the options of a term that stays on are kept."""
    without_mlm = MetricBertConfig(output_dir="out", mlm_weight=0.0)
    assert (without_mlm.mlm_head_warmup_steps, without_mlm.mlm_weight_ramp_steps) == (0, 0)
    assert without_mlm.teacher_shared_neighbours == 50
    without_teacher = MetricBertConfig(output_dir="out", teacher_weight=0.0)
    assert without_teacher.teacher_shared_neighbours == 0 and without_teacher.mlm_head_warmup_steps == 100
    assert "teacher_shared_neighbours" not in without_teacher.loss_config()
