"""Sharding a masked-LM encoder with FSDP2 so that its tied parameters live in one group.

torch 2.13 refuses a parameter that two FSDP2 groups can see. A BERT or RoBERTa masked-LM model
shares two: the MLM decoder's weight is the word-embedding table, and its bias is the head's
``bias``. accelerate's own plan (``fsdp2_prepare_model``, accelerate 1.15) gives the embeddings
layer a group of its own (it is in ``_no_split_modules``), then groups the decoder with the word
embeddings and leaves the head's ``bias`` to the root, so ``fsdp.yaml`` failed before the first
step on every masked-LM model this package trains; on a token classifier, which ties nothing, it
shards the word embeddings a second time inside the embeddings layer it has just sharded, and
fails too. Here the embeddings layer and the MLM head share one group when they share
parameters, every other layer accelerate's wrap policy names gets its own, and the root takes the
rest; accelerate then finds the model already sharded and leaves it as it is.

It runs before the optimizer is built (``CatalogTrainer.create_optimizer``), so the optimizer holds
the sharded parameters, as it does when accelerate shards.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import torch
from accelerate import Accelerator
from accelerate.utils.fsdp_utils import fsdp2_prepare_auto_wrap_policy, get_module_children_bottom_up
from torch.distributed.fsdp import FSDPModule, MixedPrecisionPolicy, fully_shard

from metricbert_trainer.base.modeling import find_mlm_head
from metricbert_trainer.errors import UsageError

logger = logging.getLogger(__name__)


def shard_with_tied_parameters_together(model: torch.nn.Module, accelerator: Accelerator) -> None:
    """Applies FSDP2 to ``model`` in place with the settings of accelerate's FSDP plugin.

    A model already sharded is left alone.
    """
    if isinstance(model, FSDPModule):
        return
    plugin = accelerator.state.fsdp_plugin
    _refuse_unsupported_settings(plugin)
    if accelerator.mixed_precision != "no":
        # FSDP2 needs one dtype per group; the policy casts for compute, as accelerate arranges it.
        for parameter in model.parameters():
            if parameter.requires_grad and parameter.dtype != torch.float32:
                parameter.data = parameter.data.to(torch.float32)
    settings = {
        "reshard_after_forward": plugin.reshard_after_forward,
        "offload_policy": plugin.cpu_offload,
        "mp_policy": plugin.mixed_precision_policy or MixedPrecisionPolicy(),
        "mesh": _data_parallel_mesh(accelerator),
    }
    plugin.set_auto_wrap_policy(model)
    wraps_on_its_own = fsdp2_prepare_auto_wrap_policy(plugin, model) or (lambda module: False)
    tied_group = tied_parameter_group(model, wraps_on_its_own)
    in_tied_group = {id(module) for owner in tied_group for module in owner.modules()}
    own_groups = [
        module
        for module in get_module_children_bottom_up(model)[:-1]
        if id(module) not in in_tied_group and wraps_on_its_own(module)
    ]
    together = " and ".join(type(module).__name__ for module in tied_group)
    for module in own_groups:
        fully_shard(module, **settings)
    if tied_group:
        fully_shard(tied_group, **settings)
    # As accelerate does for the root: torch decides whether to reshard it after the forward.
    fully_shard(model, **{name: value for name, value in settings.items() if name != "reshard_after_forward"})
    logger.info(
        "FSDP2: %d layers sharded in groups of their own, %s, the rest with the root.",
        len(own_groups),
        f"{together} in one group (tied parameters)" if together else "no tied parameters",
    )


def tied_parameter_group(
    model: torch.nn.Module, wraps_on_its_own: Callable[[torch.nn.Module], bool]
) -> list[torch.nn.Module]:
    """The modules that must share one FSDP2 group: the MLM head, and the word embeddings or the
    outermost module holding them that ``wraps_on_its_own`` (the wrap policy) would shard alone.
    Empty for a model that registers no parameter twice (a token classifier).

    Raises when a parameter of the group is also registered outside it (a layout this plan does
    not know).
    """
    if not shared_parameters(model):
        return []
    head = find_mlm_head(model)
    if head is None:
        raise UsageError(
            f"{type(model).__name__} has no MLM head this package knows (cls or lm_head), so FSDP2 cannot place "
            "its tied parameters. Use DDP or DeepSpeed (accelerate_configs/ddp.yaml, zero2.yaml, zero3.yaml)."
        )
    embeddings = model.get_input_embeddings()
    holders = [
        module
        for module in model.base_model.modules()
        if wraps_on_its_own(module) and _contains(module, embeddings)
    ]
    group = [holders[0] if holders else embeddings, head]
    grouped = {id(parameter) for module in group for parameter in module.parameters()}
    for name, parameter in model.named_parameters(remove_duplicate=False):
        owner = model.get_submodule(name.rpartition(".")[0])
        if id(parameter) in grouped and not any(_contains(module, owner) for module in group):
            raise UsageError(
                f"{name} of {type(model).__name__} shares a parameter with its embeddings or MLM head, so FSDP2 "
                "cannot place it in one group. Use DDP or DeepSpeed (accelerate_configs/ddp.yaml, zero2.yaml, zero3.yaml)."
            )
    return group


def shared_parameters(model: torch.nn.Module) -> set[int]:
    """The ids of the parameters registered under more than one name (tied weights)."""
    seen, shared = set(), set()
    for _, parameter in model.named_parameters(remove_duplicate=False):
        (shared if id(parameter) in seen else seen).add(id(parameter))
    return shared


def _contains(ancestor: torch.nn.Module, module: torch.nn.Module) -> bool:
    return any(candidate is module for candidate in ancestor.modules())


def _data_parallel_mesh(accelerator: Accelerator):
    mesh = getattr(accelerator, "torch_device_mesh", None)
    if mesh is None:
        return None
    return mesh[tuple(accelerator.parallelism_config.fsdp_dim_names)]


def _refuse_unsupported_settings(plugin) -> None:
    """Settings whose work accelerate does inside its own sharding, which this plan replaces."""
    if plugin.cpu_ram_efficient_loading:
        raise UsageError(
            "fsdp_cpu_ram_efficient_loading: true is not supported (the model is loaded whole on every "
            "process and sharded with its tied parameters together): set it to false in the accelerate config."
        )
    if plugin.activation_checkpointing:
        raise UsageError(
            "fsdp_activation_checkpointing: true is not supported: set it to false in the accelerate config and "
            "use the recipe's activation_checkpointing: true instead."
        )
