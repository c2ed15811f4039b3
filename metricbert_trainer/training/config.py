"""``CatalogTrainerConfig``: the ``TrainingArguments`` every trainer of this package shares.

Every field carries help text, so ``--help`` documents it and a YAML recipe can set it. Values
are checked when the configuration is built, so a typo fails before any model is loaded.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import ClassVar

import torch
from transformers import TrainingArguments

from metricbert_trainer.base.model_folders import is_local
from metricbert_trainer.base.option_rules import Range, at_least, check_options, within
from metricbert_trainer.base.parameter_docs import documented_parameters


def cpuinfo_fields(cpuinfo: str = "/proc/cpuinfo") -> dict[str, str]:
    """The first processor's ``name: value`` fields of ``cpuinfo`` (empty where it does not exist)."""
    fields: dict[str, str] = {}
    try:
        with open(cpuinfo, encoding="utf-8") as handle:
            for line in handle:
                if not line.strip():
                    break  # the first processor's block ends here; the others repeat it
                name, _, value = line.partition(":")
                fields.setdefault(name.strip(), value.strip())
    except OSError:
        pass
    return fields


def cpu_flags(fields: dict[str, str] | None = None) -> set[str]:
    """This CPU's feature flags (``cpuinfo_fields``); empty where /proc/cpuinfo does not exist."""
    return set((cpuinfo_fields() if fields is None else fields).get("flags", "").split())


def cpu_identity(fields: dict[str, str] | None = None) -> tuple[str, int]:
    """This CPU's vendor and family (``cpuinfo_fields``; ``("", 0)`` where they are not said, as on Arm)."""
    fields = cpuinfo_fields() if fields is None else fields
    family = fields.get("cpu family", "0")
    return fields.get("vendor_id", ""), int(family) if family.isdigit() else 0


def cpu_trains_faster_in_bf16() -> bool:
    """Whether bf16 autocast speeds training up on this CPU (``bf16_pays_on`` its flags and kind)."""
    fields = cpuinfo_fields()
    return bf16_pays_on(cpu_flags(fields), *cpu_identity(fields))


# The CPU flags of native bf16 arithmetic; without them autocast emulates bf16, at a quarter of
# fp32's speed when encoding (benchmarks/RESULTS.md, "Encoding in bf16 on a CPU").
BF16_INSTRUCTIONS = frozenset({"amx_bf16", "avx512_bf16"})


def has_bf16_instructions(flags: set[str] | None = None) -> bool:
    """Whether a CPU with ``flags`` (this one's by default, ``cpu_flags``) computes bf16 natively."""
    return bool(BF16_INSTRUCTIONS & (cpu_flags() if flags is None else flags))


# AMD's families with AVX512-BF16 where it was measured to pay: 25, Zen 4 (its 512-bit
# instructions on 256-bit units; the family's Zen 3 lacks the flag), and 26, Zen 5 (full-width units).
AMD_BF16_FAMILIES = frozenset({("AuthenticAMD", 25), ("AuthenticAMD", 26)})


def bf16_pays_on(cpu_flags: set[str], vendor: str = "", family: int = 0) -> bool:
    """Where bf16 autocast made a training step faster, measured (benchmarks/RESULTS.md): AMX's
    bf16 tiles, and AVX512-BF16 on an AMD Zen 5 ("bf16 on Zen 5") and Zen 4 ("bf16 on Zen 4").
    AVX512-BF16 alone is not enough: on a Xeon with it and no AMX the step ran slower than in fp32
    ("bf16 without AMX"). Other CPUs with the flag are not measured."""
    return "amx_bf16" in cpu_flags or ("avx512_bf16" in cpu_flags and (vendor, family) in AMD_BF16_FAMILIES)


def launched_without_accelerator() -> bool:
    """Whether this is one of several processes (torchrun, ``accelerate launch``) on a machine
    with no GPU or other accelerator: they can still train together, on the CPU over gloo."""
    return int(os.environ.get("WORLD_SIZE", "1")) > 1 and not torch.accelerator.is_available()


LOCAL_PATH = "<local path>"
NONFINITE_LOSS_ACTIONS = ("stop", "skip")


def redact_local_paths(values: dict) -> dict:
    """``values`` with every string that names a place on this machine replaced by ``LOCAL_PATH``."""
    return {name: LOCAL_PATH if is_local(value) else value for name, value in values.items()}


@documented_parameters(
    {
        "Truncation": (
            "max_length",
            "max_length_percentile",
            "max_length_cap",
        ),
        "The masked-language-model term": (
            "mlm_weight",
            "mlm_probability",
        ),
        "The output folder": ("overwrite_output_dir",),
        "Precision, numerics and checkpoints": (
            "cpu_bf16",
            "nonfinite_loss",
            "allow_pickled_checkpoints",
        ),
        "Blending with the starting weights": ("trained_weight_share",),
        "TrainingArguments defaults changed here": (
            "logging_steps",
            "remove_unused_columns",
        ),
    }
)
@dataclass
class CatalogTrainerConfig(TrainingArguments):
    """``TrainingArguments`` for training on a catalog's texts, with the settings every objective shares:
    truncation, MLM masking and its weight. ``MetricBertConfig`` and ``RecoBertConfig`` extend it."""

    mlm_weight: float = field(
        default=0.0,
        metadata={
            "help": "Weight of the masked-language-model loss (the papers: 1); 0 leaves it out. The MetricBERT "
            "recipes train with 1 on a head warmed up first (mlm_head_warmup_steps): on a model without a trained "
            "MLM head (all-MiniLM-L6-v2 ships without one) an unwarmed head's loss dominates the step "
            "(docs/quality.md, docs/recobert.md)."
        },
    )
    mlm_probability: float = field(
        default=0.0,
        metadata={
            "help": "Share of real tokens masked for MLM (BERT's 80/10/10 split; the papers: 0.15); 0 disables masking."
        },
    )
    max_length: int | None = field(
        default=None,
        metadata={
            "help": "Texts are truncated to this many tokens, in training and in evaluation. Unset: chosen from the "
            "catalog, the max_length_percentile of each field's token lengths (the largest over fields; shorter "
            "fields pad only to their own batch maximum; a field of over 100,000 texts is measured on a sample of "
            "100,000), rounded up to a multiple of 8 and capped at max_length_cap."
        },
    )
    max_length_percentile: float = field(
        default=95.0,
        metadata={"help": "Unset max_length: the percentile of the catalog's token lengths it covers."},
    )
    max_length_cap: int = field(
        default=256,
        metadata={
            "help": "Unset max_length: its upper bound (all-MiniLM-L6-v2 was trained on 256 tokens; attention "
            "costs grow with the square of the length)."
        },
    )
    trained_weight_share: float = field(
        default=1.0,
        metadata={
            "help": "Share of the trained encoder weights in the final model, the rest being the starting model's "
            "(WiSE-FT weight-space ensembling, base/weight_ensembling.py); applied once training ends, so checkpoints "
            "hold the trained weights and resume from them. 1 keeps the trained weights."
        },
    )
    cpu_bf16: bool = field(
        default=True,
        metadata={
            "help": "Without a GPU, on a CPU where bf16 was measured to pay (AMX's bf16 tiles; AVX512-BF16 on an "
            "AMD Zen 4 or Zen 5), train under bf16 autocast: faster, with rankings within the seed spread of fp32 "
            "(measurements: benchmarks/RESULTS.md). No effect when bf16 or fp16 is set, on GPUs, or on other CPUs, "
            "among them Intel's AVX512-BF16 without AMX, where bf16 is slower than fp32 (set bf16 to force it)."
        },
    )
    nonfinite_loss: str = field(
        default="stop",
        metadata={
            "help": "What a NaN or infinite training loss does: stop (raise, naming the step; the last checkpoint "
            "stays intact) or skip (drop that optimizer step's gradients, count it and go on).",
            "choices": NONFINITE_LOSS_ACTIONS,
        },
    )
    # transformers 5 dropped this TrainingArguments field; the recipes restore its meaning, and
    # more (data.output_files): an earlier run's folder is cleared, a user's files are never
    # written over without it.
    overwrite_output_dir: bool = field(
        default=False,
        metadata={
            "help": "Write into an output_dir that already holds files: what an earlier run wrote there is removed "
            "first (its checkpoints and plots too; never a file this run reads, nor one the earlier run did not "
            "write), other files are replaced where the run writes the same names. Without it such a folder is "
            "refused, unless resume_from_checkpoint continues the earlier run in it."
        },
    )
    allow_pickled_checkpoints: bool = field(
        default=False,
        metadata={
            "help": "Allow resuming DeepSpeed checkpoints, whose optimizer files are pickles (a pickle can run "
            "any code): only for checkpoints you wrote."
        },
    )
    # Defaults that differ from TrainingArguments': the collator needs the text columns, and a
    # progress log every few steps is what a user watching the loss terms wants.
    remove_unused_columns: bool = field(
        default=False, metadata={"help": "Must stay false: the collator reads the text columns itself."}
    )
    logging_steps: float = field(default=10, metadata={"help": "Log the loss terms every X update steps."})

    # The values the options above accept (base.option_rules; each subclass adds its own).
    option_ranges: ClassVar[dict[str, Range]] = {
        "mlm_weight": at_least(0),
        "mlm_probability": within(0, 1, high_open=True),
        "max_length": at_least(2),
        "max_length_percentile": within(0, 100, low_open=True),
        "max_length_cap": at_least(2),
        "trained_weight_share": within(0, 1, low_open=True),
    }

    def __post_init__(self) -> None:
        if self.hub_token is not None:
            raise ValueError(
                "hub_token is not accepted: a token in a config or on the command line ends up in logs and saved "
                "files. Set HF_TOKEN in the environment or run `hf auth login` instead."
            )
        if not self.use_cpu and launched_without_accelerator():
            # transformers would otherwise leave the processes unjoined, each training alone.
            self.use_cpu = True
        if (
            self.cpu_bf16
            and not (self.bf16 or self.fp16)
            and not torch.accelerator.is_available()
            and cpu_trains_faster_in_bf16()
        ):
            self.use_cpu, self.bf16 = True, True
        super().__post_init__()
        # Every trainer config's own options: Enum values and the ranges of option_ranges.
        check_options(self, CatalogTrainerConfig)
        if self.remove_unused_columns:
            raise ValueError(
                "remove_unused_columns would drop the text columns the collator reads: leave it false."
            )
        if self.mlm_weight > 0 and self.mlm_probability == 0:
            raise ValueError("mlm_weight > 0 needs masked tokens: set mlm_probability > 0, or mlm_weight: 0.")
        if self.nonfinite_loss not in NONFINITE_LOSS_ACTIONS:
            raise ValueError(
                f"Unknown nonfinite_loss {self.nonfinite_loss!r}; valid choices: {', '.join(NONFINITE_LOSS_ACTIONS)}."
            )

    def loss_weights(self) -> dict[str, float]:
        """The weight option of every loss term, by name: a run whose weights are all 0 trains
        nothing. Each family's config adds its own terms."""
        return {"mlm_weight": self.mlm_weight}

    def in_batch_terms(self) -> dict[str, int]:
        """The weight option of every loss term that is on and learns from the other items of a
        batch, with the fewest items a batch must hold for it to have anything to learn (a batch
        of one has no negatives; ranking needs two others). Each family's config names its own."""
        return {}

    # The arguments travel with the model: transformers pickles them into training_args.bin in
    # every saved and pushed folder and logs to_dict() to TensorBoard and W&B. Both carry the
    # settings with this machine's paths replaced, so nothing published reveals its layout.
    def to_dict(self) -> dict:
        return redact_local_paths(super().to_dict())

    def __getstate__(self) -> dict:
        return redact_local_paths(dict(self.__dict__))
