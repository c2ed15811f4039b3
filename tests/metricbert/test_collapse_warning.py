"""The collapse warning reads the logged spread, in training and evaluation logs, and stays quiet above it."""

import logging

from transformers import TrainerControl, TrainerState, TrainingArguments

from metricbert_trainer.metricbert.collapse_warning import CollapseWarningCallback


def _warnings(caplog, logs) -> list[str]:
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="metricbert_trainer.metricbert.collapse_warning"):
        CollapseWarningCallback(0.05).on_log(
            TrainingArguments(output_dir="unused", report_to="none"),
            TrainerState(),
            TrainerControl(),
            logs=logs,
        )
    return [record.getMessage() for record in caplog.records]


def test_a_spread_below_the_threshold_warns_and_one_above_it_does_not(caplog):
    assert _warnings(caplog, {"loss": 0.2, "embedding_spread": 0.06}) == []
    assert _warnings(caplog, {"loss": 0.2}) == []
    (message,) = _warnings(caplog, {"embedding_spread": 0.01})
    assert message.startswith("Embedding spread 0.0100 is below 0.0500")
    assert len(_warnings(caplog, {"eval_embedding_spread": 0.02})) == 1
