"""``MetricBertConfig``: the training arguments of ``MetricBertTrainer``, MetricBERT's loss included.

Every field carries help text, so ``--help`` documents it and a YAML recipe can set it. Names
are checked when the configuration is built, so a typo fails before any model is loaded.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass, field
from typing import ClassVar

from transformers.trainer_utils import SaveStrategy

from metricbert_trainer.base.distances import Distance
from metricbert_trainer.base.option_rules import Range, above, at_least, within
from metricbert_trainer.base.parameter_docs import documented_parameters
from metricbert_trainer.metricbert.forward import PoolingInput
from metricbert_trainer.metricbert.guide import CacheStorage
from metricbert_trainer.metricbert.losses import Objective, build_loss
from metricbert_trainer.metricbert.losses.distillation import DistillWeighting
from metricbert_trainer.metricbert.losses.mining import Anchors, Mining, NegativePool
from metricbert_trainer.metricbert.neighbourhood_batches import EXACT, check_faiss_index
from metricbert_trainer.metricbert.token_tfidf import TeacherTfidfMode
from metricbert_trainer.training.config import CatalogTrainerConfig


@documented_parameters(
    {
        "The schedule (TrainingArguments' fields, at the recipe's values)": (
            "num_train_epochs",
            "per_device_train_batch_size",
            "per_device_eval_batch_size",
            "warmup_steps",
            "weight_decay",
            "logging_steps",
            "save_strategy",
            "save_total_limit",
        ),
        "The loss family": (
            "objective",
            "margin",
            "positive_margin",
            "negative_margin",
            "scale",
            "triplet_weight",
            "distance",
        ),
        "Mining": (
            "mining",
            "anchors",
            "negative_pool",
            "gather_across_devices",
            "batch_neighbourhood_size",
            "neighbourhood_index",
            "neighbourhood_search_parameters",
        ),
        "The guide: false negatives and diagnostics": (
            "false_negative_filter",
            "false_negative_margin",
            "guide_diagnostics",
            "guide_embedding_cache",
            "guide_embedding_cache_dtype",
            "collapse_warning_spread",
            "log_gradient_norms",
        ),
        "The guard against forgetting": (
            "distill_weight",
            "distill_temperature",
            "distill_weighting",
            "distill_confidence_power",
        ),
        "The hybrid teacher": (
            "teacher_weight",
            "teacher_tfidf_weight",
            "teacher_tfidf_mode",
            "teacher_temperature",
            "teacher_shared_neighbours",
            "teacher_shared_neighbour_weight",
            "teacher_shared_neighbour_candidates",
        ),
        "The MLM term": (
            "mlm_weight",
            "mlm_probability",
            "mlm_head_warmup_steps",
            "mlm_weight_ramp_steps",
            "pooling_input",
        ),
        "Speed": ("length_groups",),
        "Levers the studies screened (docs/quality.md; the recipe keeps each at its default)": (
            "attention_dropout",
            "joint_field_pass",
            "distill_include_positive",
            "distill_within_field",
            "teacher_encoder",
            "teacher_encoder_cache",
            "mlm_head_warmup_learning_rate",
            "mlm_head_warmup_masked_tokens",
            "mlm_head_warmup_tokens_per_step",
            "mlm_head_warmup_word_prior",
        ),
    }
)
@dataclass
class MetricBertConfig(CatalogTrainerConfig):
    """``TrainingArguments`` plus MetricBERT's loss: ``L = mlm_weight * L_MLM + triplet_weight * L_T``.

    ``L_T`` is the triplet loss unless ``objective`` names another member of the loss family
    (``metricbert_trainer.metricbert.losses``); ``triplet_weight`` is then that term's weight.

    The defaults are the recommended recipe, the one ``recipes/train_catalog.py`` trains (a test
    compares the two): one epoch in batches of 32 at 5e-5; hard in-batch negatives, suspected false
    negatives filtered by the frozen starting model; the guard towards that model, weighted by how
    surely it already matches each anchor to its positive; the paper's MLM term on a head warmed up
    first, the metric term's vectors pooled from that masked pass; and the hybrid teacher (the start
    fused with TF-IDF, with the neighbours items share in the catalog) in batches of items the start
    places together. docs/metricbert_trainer.md says why each differs from the paper, whose literal
    objective is ``recipes/wines/paper.yaml``. Setting a term's weight to 0 leaves out what serves
    only it (the MLM head's warm-up and ramp; the teacher's shared neighbours).
    """

    num_train_epochs: float = field(default=1.0, metadata={"help": "Passes over the catalog."})
    per_device_train_batch_size: int = field(
        default=32,
        metadata={
            "help": "Items per batch and device; each item gives two texts, its title and its description."
        },
    )
    per_device_eval_batch_size: int = field(
        default=128, metadata={"help": "Texts encoded at once when a model ranks the catalog."}
    )
    warmup_steps: float = field(
        default=0.1,
        metadata={"help": "The learning rate's linear warm-up: steps, or below 1 a share of all the steps."},
    )
    weight_decay: float = field(default=0.01, metadata={"help": "AdamW's weight decay."})
    logging_steps: float = field(
        default=10,
        metadata={"help": "Log the loss terms every this many steps (below 1: a share of all the steps)."},
    )
    save_strategy: SaveStrategy | str = field(
        default=SaveStrategy.EPOCH,
        metadata={
            "help": "When to write a checkpoint: no, steps, epoch or best (TrainingArguments' choices)."
        },
    )
    save_total_limit: int | None = field(
        default=1,
        metadata={"help": "Checkpoints kept in output_dir (the oldest deleted first); unset keeps all."},
    )
    mlm_weight: float = field(
        default=1.0,
        metadata={
            "help": "Weight of the masked-language-model loss L_MLM (the paper's: 1); 0 leaves it out, and its "
            "head's warm-up with it. A model without a trained MLM head (all-MiniLM-L6-v2 ships without one) has "
            "its head warmed up first (mlm_head_warmup_steps)."
        },
    )
    mlm_probability: float = field(
        default=0.15,
        metadata={
            "help": "Share of real tokens masked (BERT's 80/10/10 split); with pooling_input masked the metric "
            "term's vectors come from the masked texts too. 0 disables masking."
        },
    )

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
        metadata={
            "help": "Pool sentence vectors from the masked MLM pass (the paper's single forward; the recipes' "
            "choice, docs/quality.md), or from a second pass over the unmasked text, which costs a second "
            "student pass a step."
        },
    )
    length_groups: int = field(
        default=4,
        metadata={
            "help": "Encode each field of a batch in this many groups of texts of similar token length, each "
            "padded to its own longest text instead of the field's: the encoder works through less padding while "
            "the mining batch stays whole and every vector stays the whole-batch one up to rounding. CPU only: on "
            "a GPU every pass uses one group, since each group launches every kernel again (speeds by CPU and GPU: "
            'benchmarks/RESULTS.md, "CPUs without native bf16: length groups").',
        },
    )
    joint_field_pass: bool = field(
        default=False,
        metadata={
            "help": "Encode all fields of a batch in one encoder call (titles padded to the descriptions' width) "
            "instead of a call per field: the same vectors, MLM loss and gradients up to rounding, with half the "
            "encoder's kernel launches. Meant for an accelerator whose step is bound by the host's launches (a "
            "small encoder on a GPU); on a CPU, whose cost follows the padded tokens, the titles' padding costs "
            'more than the launches save (benchmarks/RESULTS.md: "Both fields in one encoder call", CPU; "Both '
            'fields in one call, measured on a GPU").',
        },
    )
    attention_dropout: bool = field(
        default=True,
        metadata={
            "help": "Drop attention probabilities in the training steps at the rate the encoder's config gives; "
            "false leaves that dropout off the student's passes (every other dropout stays on, the saved config "
            "unchanged). On a CPU, attention with a dropout mask leaves scaled-dot-product attention's fused "
            "kernel, so false trains faster there, most on long texts; the MLM-head warm-up already encodes "
            "without it. It stays on by default: without it two quality cells fell below the rule's allowance "
            '(docs/quality.md, "The training steps without attention dropout"; speeds: benchmarks/RESULTS.md).',
        },
    )
    batch_neighbourhood_size: int = field(
        default=8,
        metadata={
            "help": "Build each batch from groups of this many items the frozen starting model places close "
            "together (both fields, as Metric_Inf compares items), drawn anew every epoch, instead of items at "
            "random: harder in-batch negatives and a teacher ranking among near items (topic-aware sampling; "
            "metricbert/neighbourhood_batches.py). Needs the guide (false_negative_filter, distill_weight, "
            "teacher_weight or guide_diagnostics); 0 draws batches at random."
        },
    )
    neighbourhood_index: str = field(
        default="exact",
        metadata={
            "help": "How batch_neighbourhood_size lists each item's near items: 'exact' compares every item with "
            "every other (N^2 work: seconds at 10^4 items, about 3 hours at 10^6 on 2 CPU cores), or a "
            "faiss.index_factory string such as 'IVF1024,Flat' that lists them approximately (needs faiss-cpu; "
            "times and overlap with the exact lists in docs/scale_out.md)."
        },
    )
    neighbourhood_search_parameters: str = field(
        default="",
        metadata={
            "help": "Search settings of an approximate neighbourhood_index, as faiss.ParameterSpace reads them "
            "(an IVF index must name its nprobe, e.g. 'nprobe=16', since FAISS's default probes one list; an HNSW index "
            "given no efSearch explores as many items as it lists, where FAISS's default explores 16)."
        },
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
    guide_embedding_cache: bool = field(
        default=True,
        metadata={
            "help": "Encode every text of the training catalog once with the frozen guide before training, in "
            "length-sorted batches, and look its vectors up each step instead of running the guide's forward: the "
            "same vectors (the guide never changes) for one inference pass over the catalog and 2 x items x hidden "
            "floats of host memory. It saves the guide's forward from the second epoch on; in the first, sorted "
            "batches make the pass a little cheaper than the forwards it replaces (benchmarks/RESULTS.md). Skipped "
            "when max_steps draws fewer items than the catalog holds.",
        },
    )
    guide_embedding_cache_dtype: CacheStorage = field(
        default=CacheStorage.FLOAT32,
        metadata={
            "help": "The number format of guide_embedding_cache's vectors: float32, or float16 at half the host "
            "memory, held once by the training processes of each machine, in its /dev/shm (for catalogs of "
            "millions of items). Trained with float16, both development catalogs ranked within the training "
            "seeds' spread of float32 (docs/scale_out.md); float32 stays the default, the recipe the quality "
            "tables measured.",
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
    distill_within_field: bool = field(
        default=False,
        metadata={
            "help": "Distil only each element's similarities to the other elements of its own field (titles to "
            "titles, descriptions to descriptions: the distances Metric_Inf reads), leaving the cross-field ones "
            "to the metric term."
        },
    )
    distill_weighting: DistillWeighting = field(
        default=DistillWeighting.GUIDE_CONFIDENCE,
        metadata={
            "help": "How each anchor's distillation term is weighted: uniform, or guide_confidence (by the "
            "starting model's softmax probability, at distill_temperature, that the anchor's nearest batch "
            "element is its own positive: the guard holds the items the starting model already matches "
            "across fields and frees those it does not; logged as distill_anchor_weight). Default "
            "guide_confidence: the uniform guard held back most of the gain on a catalog the starting "
            "model matched poorly (docs/quality.md)."
        },
    )
    distill_confidence_power: float = field(
        default=2.0,
        metadata={
            "help": "With distill_weighting guide_confidence, each anchor's weight is the guide's confidence raised "
            "to this power. Default 2: the anchors the starting model matches surely keep nearly their whole "
            "weight while the doubtful ones, where the positive is merely likely, lose most of theirs; 1: the "
            "plain probability (the study that chose it: docs/quality.md)."
        },
    )
    teacher_weight: float = field(
        default=1.0,
        metadata={
            "help": "Weight of the hybrid-teacher term (losses.teacher): each batch's item-to-item ranking under "
            "the student's Metric_Inf distilled from the frozen starting model fused with TF-IDF, the ranking "
            "evaluate and recommend use; logged as teacher_loss. 0 leaves it out."
        },
    )
    teacher_tfidf_weight: float = field(
        default=0.2,
        metadata={
            "help": "TF-IDF's weight in the teacher's fusion (the part --tfidf-weight plays in the hybrid "
            "ranking, chosen apart from it: docs/quality.md)."
        },
    )
    teacher_tfidf_mode: TeacherTfidfMode = field(
        default=TeacherTfidfMode.METRIC_INF,
        metadata={
            "help": "What the teacher's TF-IDF compares, as --tfidf-mode in the hybrid ranking: metric_inf, each "
            "field with its own; concat, an item's fields joined, so that a word one item's title shares with "
            "another's description counts (a two-field catalog; others compare each field)."
        },
    )
    teacher_temperature: float = field(
        default=0.5,
        metadata={"help": "Temperature of the teacher term's softmaxes over standardised distances."},
    )
    teacher_encoder: str | None = field(
        default=None,
        metadata={
            "help": "A second frozen sentence encoder (a folder or Hub id, any tokenizer and width) whose Metric_Inf "
            "joins the frozen start's in the teacher, the two standardised rankings averaged "
            "(metricbert/teacher_encoder.py); it encodes every catalog text once before training. Needs "
            "teacher_weight > 0."
        },
    )
    teacher_encoder_cache: str | None = field(
        default=None,
        metadata={
            "help": "An .npz that keeps teacher_encoder's vectors between runs, filed by text under a fingerprint of "
            "the encoder and max_length: runs over the same texts encode them once (it only ever replaces such a "
            "cache)."
        },
    )
    teacher_shared_neighbours: int = field(
        default=50,
        metadata={
            "help": "With k > 0 the teacher also counts shared neighbours: each catalog item's k nearest items under "
            "the teacher's ranking of the whole catalog are listed once before training, and two batch items are "
            "the closer for the teacher the more of them they share (metricbert/shared_neighbours.py; N^2 work "
            "over the catalog). Left out with the teacher (teacher_weight 0), and on a catalog of other than two "
            "fields or of too few items (with a warning). 0 leaves it out."
        },
    )
    teacher_shared_neighbour_weight: float = field(
        default=0.5,
        metadata={
            "help": "The shared neighbours' weight in the teacher's distances, against 1 minus it for the fused "
            "encoder and TF-IDF ranking (both standardised over the batch)."
        },
    )
    teacher_shared_neighbour_candidates: int = field(
        default=0,
        metadata={
            "help": "With C > 0 each item's teacher_shared_neighbours list is searched among its C nearest items "
            "under the frozen start (a FAISS HNSW index of its vectors), re-scored by the teacher's whole ranking, "
            "instead of among every item: N*C work instead of N^2, for catalogs of hundreds of thousands of items "
            "(docs/scale_out.md). 0 lists exactly (default); needs the angular or cosine distance."
        },
    )
    mlm_head_warmup_steps: int = field(
        default=100,
        metadata={
            "help": "Before the joint objective, train only the MLM head (encoder frozen) for this many batches, "
            "so L_MLM starts from a head that predicts tokens (all-MiniLM-L6-v2 ships without one). Skipped when "
            "resuming; left out with the MLM term (mlm_weight 0)."
        },
    )
    mlm_head_warmup_learning_rate: float = field(
        default=3e-3, metadata={"help": "AdamW learning rate of the MLM-head warm-up."}
    )
    mlm_head_warmup_masked_tokens: int = field(
        default=10_000,
        metadata={
            "help": "The MLM-head warm-up encodes fresh batches once (frozen encoder; dropout on as in the joint "
            "steps but off the attention probabilities, whose masks would double the encoding's cost on a CPU; "
            "length_groups groups) until their masked positions hold this many tokens (at most one batch per "
            "warm-up step), and its steps cycle through them: the head's word prior needs a number of masked "
            "tokens, not of batches, so short texts get more batches and long ones fewer (docs/quality.md). 0 "
            "encodes a fresh batch for every step, which on long descriptions makes the warm-up as long as the "
            "training. Split among the processes of a distributed run.",
        },
    )
    mlm_head_warmup_tokens_per_step: int = field(
        default=256,
        metadata={
            "help": "Each warm-up step trains the head on this many masked tokens drawn from those encoded, "
            "not on all of one batch's: a step's softmax over the whole vocabulary per token cost as much as "
            "the encoding on long descriptions (benchmarks/RESULTS.md). 0: every masked token of one batch a step."
        },
    )
    mlm_head_warmup_word_prior: bool = field(
        default=True,
        metadata={
            "help": "Before the warm-up's first step, set the MLM head's output bias to the catalog's log "
            "word-piece frequencies (counted from the tokenized catalog, no model): the prior a fresh head "
            "otherwise spends its steps learning (docs/quality.md).",
        },
    )
    mlm_weight_ramp_steps: int = field(
        default=20,
        metadata={
            "help": "Raise the MLM weight linearly from 0 to mlm_weight over the first N optimizer steps; left "
            "out with the MLM term (mlm_weight 0)."
        },
    )
    log_gradient_norms: bool = field(
        default=False,
        metadata={
            "help": "At each logging step, log the norm of each weighted loss term's gradient on the encoder "
            "(grad_norm_mlm, grad_norm_<objective>, grad_norm_distill): how hard each term pulls, which the "
            "terms' values do not say. One extra backward pass per term on those steps; training is unchanged. "
            "One process, without gradient checkpointing."
        },
    )
    collapse_warning_spread: float = field(
        default=0.05,
        metadata={
            "help": "Warn when the mean angular distance between batch elements falls below this (collapse)."
        },
    )

    option_ranges: ClassVar[dict[str, Range]] = {
        "length_groups": at_least(1),
        "batch_neighbourhood_size": at_least(0),
        "margin": at_least(0),
        "triplet_weight": at_least(0),
        "distill_weight": at_least(0),
        "teacher_weight": at_least(0),
        "teacher_tfidf_weight": within(0, 1),
        "teacher_temperature": above(0),
        "teacher_shared_neighbours": at_least(0),
        "teacher_shared_neighbour_weight": within(0, 1),
        "teacher_shared_neighbour_candidates": at_least(0),
        "false_negative_margin": within(0, 1, high_open=True),
        "distill_confidence_power": above(0),
        "distill_temperature": above(0),
        "mlm_head_warmup_steps": at_least(0),
        "mlm_head_warmup_masked_tokens": at_least(0),
        "mlm_head_warmup_tokens_per_step": at_least(0),
        "mlm_weight_ramp_steps": at_least(0),
        "mlm_head_warmup_learning_rate": above(0),
    }

    def __post_init__(self) -> None:
        super().__post_init__()
        # A term at weight 0 is left out with what serves only it, so that one option turns off
        # what the defaults turn on (and a model card does not record a warm-up that never ran).
        if self.mlm_weight == 0:
            self.mlm_head_warmup_steps = self.mlm_weight_ramp_steps = 0
        if self.teacher_weight == 0:
            self.teacher_shared_neighbours = 0
        if self.per_device_train_batch_size < 1:
            # Named for itself first: the neighbourhoods' rule below would blame batch_neighbourhood_size.
            raise ValueError(
                f"per_device_train_batch_size must be >= 1; got {self.per_device_train_batch_size}."
            )
        if (
            self.batch_neighbourhood_size == 1
            or self.batch_neighbourhood_size > self.per_device_train_batch_size
        ):
            raise ValueError(
                f"batch_neighbourhood_size {self.batch_neighbourhood_size}: a neighbourhood holds at least 2 "
                f"items and fits in a batch ({self.per_device_train_batch_size} items); 0 draws batches at random."
            )
        if self.batch_neighbourhood_size and self.neighbourhood_index != EXACT:
            check_faiss_index(self.neighbourhood_index, self.neighbourhood_search_parameters)
        if self.guide_embedding_cache_dtype is not CacheStorage.FLOAT32 and not self.guide_embedding_cache:
            raise ValueError(
                f"guide_embedding_cache_dtype {self.guide_embedding_cache_dtype.value} is the format of the guide's "
                "cache: set guide_embedding_cache true, or leave the dtype float32."
            )
        if (self.teacher_encoder or self.teacher_encoder_cache) and self.teacher_weight == 0:
            raise ValueError(
                "teacher_encoder and teacher_encoder_cache serve the teacher term: set teacher_weight > 0."
            )
        if self.teacher_shared_neighbour_candidates:
            if self.teacher_shared_neighbour_candidates < self.teacher_shared_neighbours or not (
                self.teacher_shared_neighbours
            ):
                raise ValueError(
                    "teacher_shared_neighbour_candidates searches the teacher_shared_neighbours lists: set "
                    "teacher_shared_neighbours > 0 and the candidates at least as many (or 0 to list exactly)."
                )
            if Distance(self.distance) is Distance.EUCLIDEAN or self.teacher_tfidf_weight == 1:
                raise ValueError(
                    "teacher_shared_neighbour_candidates finds candidates by the start's cosines: it needs the "
                    "angular or cosine distance, and teacher_tfidf_weight below 1 (the start in the teacher)."
                )
            if importlib.util.find_spec("faiss") is None:
                raise ValueError(
                    "teacher_shared_neighbour_candidates searches a FAISS index: pip install "
                    "'metricbert-trainer[faiss]'."
                )
        if self.teacher_encoder_cache and not self.teacher_encoder:
            raise ValueError(
                "teacher_encoder_cache keeps teacher_encoder's vectors: name the teacher_encoder too."
            )
        if self.log_gradient_norms and self.gradient_checkpointing:
            raise ValueError(
                "log_gradient_norms takes each term's gradient on its own, which gradient checkpointing cannot "
                "give: turn one of them off."
            )
        # Building the loss checks the objective's own settings (margins, scale, mining) now,
        # before any model is loaded.
        build_loss(self)

    def loss_weights(self) -> dict[str, float]:
        return {
            "triplet_weight": self.triplet_weight,
            **super().loss_weights(),
            "distill_weight": self.distill_weight,
            "teacher_weight": self.teacher_weight,
        }

    def in_batch_terms(self) -> dict[str, int]:
        """The metric term mines its negatives in the batch (every objective of the family does);
        the teacher term ranks each item's other batch items, which takes at least two of them."""
        terms = {"triplet_weight": 2} if self.triplet_weight > 0 else {}
        if self.teacher_weight > 0:
            terms["teacher_weight"] = 3
        return terms

    def loss_config(self) -> dict[str, object]:
        """The loss settings a model card records beside the built loss's own
        (``InBatchLoss.get_config_dict``, which the trainer adds)."""
        return {
            "objective": Objective(self.objective).value,
            "triplet_weight": self.triplet_weight,
            "mlm_weight": self.mlm_weight,
            "mlm_probability": self.mlm_probability,
            "mlm_head_warmup_steps": self.mlm_head_warmup_steps,
            "mlm_weight_ramp_steps": self.mlm_weight_ramp_steps,
            "distill_weight": self.distill_weight,
            "distill_temperature": self.distill_temperature,
            "distill_include_positive": self.distill_include_positive,
            "distill_within_field": self.distill_within_field,
            "distill_weighting": self.distill_weighting.value,
            "distill_confidence_power": self.distill_confidence_power,
            "teacher_weight": self.teacher_weight,
            "teacher_tfidf_weight": self.teacher_tfidf_weight,
            # Named only when joined: the cards of runs that compare each field stay as they were.
            **(
                {"teacher_tfidf_mode": self.teacher_tfidf_mode.value}
                if self.teacher_tfidf_mode is not TeacherTfidfMode.METRIC_INF
                else {}
            ),
            "teacher_temperature": self.teacher_temperature,
            # Named only when there is one: the cards of runs without a second encoder stay as they were.
            **({"teacher_encoder": self.teacher_encoder} if self.teacher_encoder else {}),
            **(
                {
                    "teacher_shared_neighbours": self.teacher_shared_neighbours,
                    "teacher_shared_neighbour_weight": self.teacher_shared_neighbour_weight,
                    # Named only when searched: exact lists' cards stay as they were.
                    **(
                        {"teacher_shared_neighbour_candidates": self.teacher_shared_neighbour_candidates}
                        if self.teacher_shared_neighbour_candidates
                        else {}
                    ),
                }
                if self.teacher_shared_neighbours
                else {}
            ),
            "pooling_input": self.pooling_input.value,
            # Named only when float16: the cards of float32 caches (the default) stay as they were.
            **(
                {"guide_embedding_cache_dtype": self.guide_embedding_cache_dtype.value}
                if self.guide_embedding_cache and self.guide_embedding_cache_dtype is not CacheStorage.FLOAT32
                else {}
            ),
            "false_negative_filter": self.false_negative_filter,
            "false_negative_margin": self.false_negative_margin,
            "gather_across_devices": self.gather_across_devices,
            # Which items share a batch decides the in-batch negatives and what the teacher ranks.
            "batch_neighbourhood_size": self.batch_neighbourhood_size,
        }
