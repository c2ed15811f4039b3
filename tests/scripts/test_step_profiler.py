"""The benchmarks' step profiler tells the update's operators from the rest of a step.

A host-bound GPU step costs what its operators cost to dispatch, and a CPU can count them; but on
a CPU the gradient clipping and the optimizer's step loop over every parameter tensor, where a GPU
runs a few fused kernels. ``benchmarks/RESULTS.md`` predicts GPU ratios from the count without
them, so the profiler must find exactly those operators.
"""

import re

import pytest
import torch
from conftest import benchmark_module, tiny_metricbert_trainer


@pytest.fixture(scope="module")
def step_timer():
    with benchmark_module("step_timer") as module:
        yield module


def aten_calls(events) -> int:
    return sum(1 for event in events if event.name.startswith("aten::"))


def test_the_update_operators_are_the_clipping_and_the_optimizer_step_exactly(step_timer, tiny_model_path):
    from transformers import BertForMaskedLM

    model = BertForMaskedLM.from_pretrained(tiny_model_path)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    tokens = torch.randint(1000, 2000, (4, 12), generator=torch.Generator().manual_seed(0))

    def backward():
        optimizer.zero_grad()
        model(input_ids=tokens, labels=tokens).loss.backward()

    def update():
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()

    for _ in range(2):  # the optimizer's state exists from the first step on
        backward()
        update()
    profile = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], with_stack=True)
    with profile:
        backward()
        update()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as backward_alone:
        backward()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as update_alone:
        update()
    updating = aten_calls(update_alone.events())
    assert step_timer.update_operator_calls(profile.events()) == updating > 0
    assert aten_calls(profile.events()) == aten_calls(backward_alone.events()) + updating


def test_a_training_step_reports_its_operators_with_and_without_the_update(
    step_timer, tmp_path, tiny_model_path, tokenizer, wines_80
):
    report = tmp_path / "profile.txt"
    trainer = tiny_metricbert_trainer(
        tmp_path / "run", tiny_model_path, tokenizer, wines_80.dataset, max_steps=4
    )
    trainer.add_callback(step_timer.StepProfiler(str(report), first=1, count=2))
    trainer.train()
    first_line = report.read_text(encoding="utf-8").splitlines()[0]
    found = re.search(r"(\d+) ATen operator calls a step, (\d+) without the gradient clipping", first_line)
    assert found, first_line
    total, rest = int(found.group(1)), int(found.group(2))
    tensors = sum(1 for parameter in trainer.model.parameters() if parameter.requires_grad)
    # On a CPU the Trainer's clipping and AdamW touch every parameter tensor, several times.
    assert total - rest >= 3 * tensors
    assert rest > total - rest
    # The tables list operators, not the Python frames recorded to place them.
    assert ".py(" not in report.read_text(encoding="utf-8")
