import torch

from metricbert_trainer.base.attention import varying_shape_attention


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
