import pytest
import torch

from metricbert_trainer.base.attention import attention_dropout_off, varying_shape_attention


def test_cudnn_attention_is_left_out_on_cuda_only_and_only_inside():
    backends = torch.backends.cuda
    before = (
        backends.cudnn_sdp_enabled(),
        backends.flash_sdp_enabled(),
        backends.mem_efficient_sdp_enabled(),
    )
    with varying_shape_attention(torch.device("cuda")):
        assert not backends.cudnn_sdp_enabled()
        assert backends.flash_sdp_enabled() and backends.mem_efficient_sdp_enabled()
    assert (
        backends.cudnn_sdp_enabled(),
        backends.flash_sdp_enabled(),
        backends.mem_efficient_sdp_enabled(),
    ) == before
    with varying_shape_attention(torch.device("cpu")):
        assert backends.cudnn_sdp_enabled() == before[0]


@pytest.mark.parametrize("attention_implementation", ["sdpa", "eager"])
def test_attention_dropout_off_leaves_the_hidden_dropout_on(tokenizer, attention_implementation):
    from conftest import TINY_ENCODER
    from transformers import BertConfig, BertModel

    batch = tokenizer(
        ["a bright red wine", "crisp white wine with citrus notes"], padding=True, return_tensors="pt"
    )

    def passes(attention_dropout: float, hidden_dropout: float) -> list[torch.Tensor]:
        torch.manual_seed(0)
        config = BertConfig(
            vocab_size=tokenizer.vocab_size,
            attention_probs_dropout_prob=attention_dropout,
            hidden_dropout_prob=hidden_dropout,
            attn_implementation=attention_implementation,
            **TINY_ENCODER,
        )
        model = BertModel(config).train()
        with torch.no_grad():
            eval_output = model.eval()(**batch).last_hidden_state
            model.train()
            with attention_dropout_off(model):
                inside = [model(**batch).last_hidden_state for _ in range(2)]
            outside = model(**batch).last_hidden_state
        assert all(module.training for module in model.modules())  # given back
        return [eval_output, *inside, outside]

    # Attention dropout alone: off inside (both passes are the eval pass), on again after.
    eval_output, first, second, after = passes(attention_dropout=0.5, hidden_dropout=0.0)
    assert torch.allclose(first, eval_output, atol=1e-6) and torch.allclose(second, eval_output, atol=1e-6)
    assert not torch.allclose(after, eval_output, atol=1e-3)
    # Hidden dropout alone: still drawn inside, anew on each pass.
    eval_output, first, second, _ = passes(attention_dropout=0.0, hidden_dropout=0.5)
    assert not torch.allclose(first, second, atol=1e-3) and not torch.allclose(first, eval_output, atol=1e-3)
