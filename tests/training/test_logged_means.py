import torch

from metricbert_trainer.training.trainer import local_means


def test_values_kept_on_the_device_average_exactly_as_the_floats_did():
    steps = torch.rand(7, generator=torch.Generator().manual_seed(0)) * 10  # float32, as a loss
    as_floats = [float(value) for value in steps]
    kept = [value.to(torch.float64) for value in steps]  # what CatalogTrainer.record keeps
    means = local_means(
        {"on_device": kept, "floats": as_floats, "mixed": [kept[0], as_floats[1]], "none": []}
    )
    assert means["on_device"] == sum(as_floats) / len(as_floats)
    assert means["floats"] == means["on_device"]
    assert means["mixed"] == (as_floats[0] + as_floats[1]) / 2
    assert "none" not in means
    assert all(type(value) is float for value in means.values())
