"""The MLM loss computed in one step with the decoder's product, against the plain cross-entropy of a
real (tiny, randomly initialised) BERT head: the same loss and the same gradients for every parameter."""

import pytest
import torch
import torch.nn.functional as F

from metricbert_trainer.base.modeling import find_mlm_head, load_masked_lm
from metricbert_trainer.base.vocabulary_loss import ROW_MULTIPLE, ROWS_AT_A_TIME, head_cross_entropy


@pytest.fixture
def model(tiny_model_path):
    torch.manual_seed(0)
    model = load_masked_lm(tiny_model_path)
    model.train()
    return model


def loss_and_gradients(model, hidden, targets, scale, through_head, bf16):
    hidden = hidden.clone().requires_grad_()
    head = find_mlm_head(model)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        if through_head:
            loss = head_cross_entropy(model, head, hidden, targets)
        else:
            loss = F.cross_entropy(head(hidden).float(), targets)
    (loss * scale).backward()
    gradients = {"hidden": hidden.grad}
    gradients.update({name: parameter.grad.clone() for name, parameter in head.named_parameters()})
    model.zero_grad(set_to_none=True)
    return loss.detach(), gradients


# Rows: fewer than one slice of rows, a number that leaves a partial last slice, and a whole
# multiple of the padding (none added).
@pytest.mark.parametrize("rows", [3, 3 * ROWS_AT_A_TIME + 5, ROW_MULTIPLE])
@pytest.mark.parametrize("scale", [1.0, 0.37])
@pytest.mark.parametrize(("bf16", "tolerance"), [(False, 1e-5), (True, 2e-2)])
def test_the_loss_and_every_gradient_are_those_of_the_plain_cross_entropy(
    model, rows, scale, bf16, tolerance
):
    hidden = torch.randn(rows, model.config.hidden_size)
    targets = torch.randint(0, model.config.vocab_size, (rows,))
    expected_loss, expected = loss_and_gradients(model, hidden, targets, scale, through_head=False, bf16=bf16)
    loss, gradients = loss_and_gradients(model, hidden, targets, scale, through_head=True, bf16=bf16)
    # The loss is the same fp32 cross-entropy of the same logits.
    torch.testing.assert_close(loss, expected_loss, rtol=1e-6, atol=1e-6)
    assert gradients.keys() == expected.keys() and "predictions.decoder.weight" in gradients
    for name, gradient in gradients.items():
        assert gradient.dtype == expected[name].dtype, name
        # bf16: the gradient of the logits is rounded to bf16 before the scale, not after.
        error = (gradient - expected[name]).abs().max() / expected[name].abs().max()
        assert error <= (tolerance if scale != 1.0 or not bf16 else 1e-5), (name, error)


def test_a_bert_heads_decoder_returns_the_loss_and_then_its_logits_again(model):
    head, decoder = find_mlm_head(model), model.get_output_embeddings()
    outputs = []
    decoder.register_forward_hook(lambda module, inputs, output: outputs.append(output.shape))
    hidden = torch.randn(4, model.config.hidden_size)
    head_cross_entropy(model, head, hidden, torch.tensor([1, 2, 3, 4]))
    # No [4, vocabulary] logits: the decoder's call computed the loss itself (a one-row probe
    # before it saw whether the head returns the decoder's output as it is).
    assert torch.Size([4, model.config.vocab_size]) not in outputs and outputs[-1] == torch.Size([])
    assert "forward" not in vars(decoder)
    assert head(hidden).shape == (4, model.config.vocab_size)


def test_a_head_that_changes_the_decoders_output_gets_the_plain_loss(model):
    class ScaledHead(torch.nn.Module):
        """A head whose logits are not its decoder's output as it is."""

        def __init__(self, head):
            super().__init__()
            self.head = head

        def forward(self, hidden):
            return 2.0 * self.head(hidden)

    scaled = ScaledHead(find_mlm_head(model))
    hidden = torch.randn(5, model.config.hidden_size)
    targets = torch.randint(0, model.config.vocab_size, (5,))
    with torch.no_grad():
        expected = F.cross_entropy(scaled(hidden).float(), targets)
        torch.testing.assert_close(head_cross_entropy(model, scaled, hidden, targets), expected)


def test_a_frozen_decoder_gets_no_gradient_and_its_head_does(model):
    # The MLM head's warm-up trains the head's own parameters with the word embeddings frozen.
    model.get_input_embeddings().weight.requires_grad_(False)
    head = find_mlm_head(model)
    hidden = torch.randn(6, model.config.hidden_size)
    head_cross_entropy(model, head, hidden, torch.randint(0, model.config.vocab_size, (6,))).backward()
    assert model.get_output_embeddings().weight.grad is None
    assert head.predictions.decoder.bias.grad is not None
    assert head.predictions.transform.dense.weight.grad is not None


def test_a_resized_vocabulary_is_scored_by_its_new_decoder(model):
    head = find_mlm_head(model)
    hidden = torch.randn(7, model.config.hidden_size)
    head_cross_entropy(model, head, hidden, torch.randint(0, model.config.vocab_size, (7,)))
    model.resize_token_embeddings(model.config.vocab_size + 8)
    # Words only the new table has: the loss must read the resized decoder, not the first one.
    targets = torch.arange(model.config.vocab_size - 7, model.config.vocab_size)
    with torch.no_grad():
        expected = F.cross_entropy(head(hidden).float(), targets)
        torch.testing.assert_close(head_cross_entropy(model, head, hidden, targets), expected)
