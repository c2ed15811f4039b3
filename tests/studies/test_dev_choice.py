"""The rule that turns a dev sweep into a default (``studies/dev_choice.py``), on its second clause:
where every setting lowers some case, the current default stays unless another is as good."""

from __future__ import annotations

from dev_choice import chosen_setting, setting_gains


def row(setting: float, benchmark: str, value: float) -> dict:
    return {
        "benchmark": benchmark, "view": "plain", "model": "m", "train_seed": None, "setting": setting,
        "metrics": {"mpr": value, "hr@100": value, "map": value, "ndcg@20": value},
    }  # fmt: skip


def choice(rows: list[dict], current: float) -> float:
    return chosen_setting(
        setting_gains(rows, lambda found: found["setting"], 0.0), baseline=0.0, current=current
    )


def test_where_every_setting_lowers_a_case_the_default_stays_unless_another_is_as_good_everywhere():
    rows = [row(0.0, "a", 10.0), row(0.0, "b", 10.0)]
    rows += [row(0.2, "a", 9.9), row(0.2, "b", 12.0)]  # lowers a a little, raises b more
    rows += [row(0.4, "a", 9.5), row(0.4, "b", 14.0)]  # the best mean, but below 0.2 on a
    assert choice(rows, current=0.2) == 0.2
    assert choice(rows, current=0.0) == 0.0  # neither setting is as good as the baseline on a
    rows += [row(0.1, "a", 9.95), row(0.1, "b", 12.5)]  # at least as good as 0.2 in both, better mean
    assert choice(rows, current=0.2) == 0.1
