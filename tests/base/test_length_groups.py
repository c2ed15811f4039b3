import pytest
import torch

from metricbert_trainer.base.length_groups import (
    group_inputs,
    in_batch_order,
    length_groups_on,
    split_by_length,
)


def _right_padded(lengths, width):
    mask = torch.zeros(len(lengths), width, dtype=torch.long)
    for row, length in enumerate(lengths):
        mask[row, :length] = 1
    ids = torch.arange(1, len(lengths) * width + 1).view(len(lengths), width) * mask
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": torch.zeros_like(mask)}


def test_groups_hold_texts_of_similar_length_and_every_row_once():
    inputs = _right_padded([9, 2, 7, 3, 12, 2, 5], width=12)
    groups = split_by_length(inputs["attention_mask"], 3)
    assert [group.tolist() for group in groups] == [[1, 5, 3], [6, 2], [0, 4]]
    assert sorted(torch.cat(groups).tolist()) == list(range(7))


def test_one_group_is_the_batch_in_its_order_and_more_groups_than_rows_leaves_none_empty():
    mask = _right_padded([4, 1, 3], width=4)["attention_mask"]
    assert [group.tolist() for group in split_by_length(mask, 1)] == [[0, 1, 2]]
    assert [group.tolist() for group in split_by_length(mask, 8)] == [[1], [2], [0]]
    with pytest.raises(ValueError, match="groups must be >= 1"):
        split_by_length(mask, 0)


def test_a_group_is_cut_to_its_longest_text_with_every_tensor_alike():
    inputs = _right_padded([9, 2, 7, 3], width=12)
    group = group_inputs(inputs, torch.tensor([1, 3]))
    assert {name: tuple(tensor.shape) for name, tensor in group.items()} == {
        "input_ids": (2, 3),
        "attention_mask": (2, 3),
        "token_type_ids": (2, 3),
    }
    assert torch.equal(group["input_ids"], inputs["input_ids"][[1, 3], :3])


def test_a_left_padded_group_keeps_its_width_so_no_token_changes_position():
    inputs = _right_padded([2, 4], width=6)
    inputs = {name: tensor.flip(1) for name, tensor in inputs.items()}
    group = group_inputs(inputs, torch.tensor([0]))
    assert torch.equal(group["input_ids"], inputs["input_ids"][[0]])


def test_results_come_back_in_batch_order():
    groups = [torch.tensor([2, 0]), torch.tensor([3, 1])]
    parts = [torch.tensor([[20.0], [0.0]]), torch.tensor([[30.0], [10.0]])]
    assert in_batch_order(parts, groups).flatten().tolist() == [0.0, 10.0, 20.0, 30.0]


def test_groups_are_a_cpu_speed_up_only():
    # On a GPU each group launches every kernel again: one padded batch per field there.
    assert length_groups_on(torch.device("cpu"), 4) == 4
    assert length_groups_on(torch.device("cuda", 0), 4) == 1
    assert length_groups_on(torch.device("cuda"), 1) == 1
