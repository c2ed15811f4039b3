"""The model card (README.md) of a trained checkpoint: Hub metadata, usage, objective, logs, results.

The card is rebuilt from the trainer's state at every save and before every push, so a
checkpoint folder, the final model and the Hub repository all say how the weights were made.
It is written for strangers: it names the starting model by its Hub id and the catalog by its
name, never by a local path, and holds no token (only settings and logged numbers go in).
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from urllib.parse import quote

from huggingface_hub import EvalResult, ModelCardData

from metricbert_trainer.base.model_folders import is_local
from metricbert_trainer.publishing.markdown import escape_markdown, markdown_table

RANKING_METRICS = {
    "mpr": "MPR",
    "mrr": "MRR",
    "hr@10": "HR@10",
    "hr@100": "HR@100",
    "map": "MAP",
    "ndcg@20": "NDCG@20",
}
FRAMEWORKS = (
    "metricbert-trainer",
    "transformers",
    "torch",
    "accelerate",
    "datasets",
    "sentence-transformers",
)
# Logged statistics worth a column beside the loss terms: mining health and collapse.
LOGGED_STATISTICS = ("negative_closer_rate", "embedding_spread")
# At most this many rows of the logged-loss table; longer runs are sampled evenly.
MAX_LOG_ROWS = 20
# Usage examples longer than this are cut at a word boundary: a snippet, not the whole text.
EXAMPLE_CHARACTERS = 120


@dataclass(frozen=True)
class CardMethod:
    """What a model card says about the method that trained the model; each trainer holds its own
    (``card_method``), so a card cites and describes the right paper.

    ``goal`` and ``inference`` may name ``{fields}``, the catalog's text fields joined by "and".
    A method whose model is not a sentence encoder (a tagger) names its own Hub ``pipeline_tag``
    and ``library_name``, how it was ``supervised``, and its ``usage`` section, a markdown
    template that may name ``{model_id}`` and ``{example}``: JSON (so also Python) string literals of the
    model's name and of the first example text, to be written as they are, without quotes.
    """

    name: str  # opens the card: what was trained, with its paper
    family: str  # the method's short name, for commit messages
    goal: str  # what the training makes the model do
    inference: str  # how the trained model recommends
    trainer: str  # the class that trains it further
    script: str | None = None  # the recipe that trains it further
    citation: str | None = None  # BibTeX of the paper
    pipeline_tag: str = "sentence-similarity"
    library_name: str = "sentence-transformers"
    supervised: str = "without labels"
    usage: str | None = None
    # What the evaluation logs (``eval_<name>``) and the card shows, with each metric's display
    # name; the first one marks a log entry as an evaluation.
    metrics: Mapping[str, str] = field(default_factory=lambda: dict(RANKING_METRICS))
    # The evaluation's task, for the Hub's model index, and what its table measures.
    task_name: str = "Item-to-item recommendation"
    evaluation_description: str = (
        "Ranking of {catalog} against its annotated similar items{annotations} (mean percentile rank, mean "
        "reciprocal rank and hit rates in %, filtered ranks; higher is better)"
    )


@dataclass
class ModelCardInfo:
    """What the trainer cannot know by itself: where the model and the data came from.

    ``base_model`` is kept only when it is a Hub id (a local folder is not meaningful to
    readers and would expose the machine's layout); ``catalog`` is reduced to its file name.
    """

    base_model: str | None = None
    catalog: str | None = None
    catalog_items: int | None = None
    # The annotation file the evaluation ranks against (its name only): which seeds a number is of.
    annotations: str | None = None
    text_fields: tuple[str, ...] = ("title", "description")
    dataset_name: str | None = None
    license: str | None = None
    language: str | None = "en"
    tags: list[str] = field(default_factory=list)
    # Texts for the card's usage snippets, drawn from the training data (``usage_examples``).
    examples: tuple[str, ...] = ()

    @property
    def hub_base_model(self) -> str | None:
        if not self.base_model or is_local(self.base_model):
            return None
        return self.base_model

    @property
    def catalog_label(self) -> str | None:
        return self.dataset_name or (Path(self.catalog).name if self.catalog else None)


def card_hyperparameters(args, state) -> dict[str, object]:
    """The training settings a model card lists, from a run's ``TrainingArguments`` and its
    ``TrainerState`` (the objective's own settings are in the family's section)."""
    return {
        "learning_rate": args.learning_rate,
        "per_device_train_batch_size": args.per_device_train_batch_size,
        "processes": args.world_size,
        "gradient_accumulation_steps": args.gradient_accumulation_steps,
        "total_train_batch_size": args.per_device_train_batch_size
        * args.world_size
        * args.gradient_accumulation_steps,
        "num_train_epochs": args.num_train_epochs,
        "max_steps": state.max_steps or args.max_steps,
        "optimizer": getattr(args.optim, "value", args.optim),
        "weight_decay": args.weight_decay,
        "lr_scheduler_type": getattr(args.lr_scheduler_type, "value", args.lr_scheduler_type),
        "warmup_steps": args.warmup_steps,
        "max_length": args.max_length,
        "trained_weight_share": args.trained_weight_share,
        "precision": "bf16" if args.bf16 else ("fp16" if args.fp16 else "fp32"),
        "activation_checkpointing": args.activation_checkpointing,
        "seed": args.seed,
    }


def usage_examples(item: Mapping[str, object], fields: Sequence[str]) -> tuple[str, ...]:
    """An item's texts for the usage snippets, each cut to about ``EXAMPLE_CHARACTERS``."""
    examples = []
    for name in fields:
        text = " ".join(str(item.get(name, "")).split())
        if len(text) > EXAMPLE_CHARACTERS:
            text = text[:EXAMPLE_CHARACTERS].rsplit(" ", 1)[0] + " ..."
        if text:
            examples.append(text)
    return tuple(examples)


def render_model_card(
    *,
    info: ModelCardInfo,
    model_name: str,
    method: CardMethod,
    repo_id: str | None,
    objective_section: str,
    hyperparameters: dict[str, object],
    log_history: list[dict[str, float]],
    trainer_tags: list[str],
) -> str:
    """The card's markdown, YAML metadata first. ``method`` opens the summary and supplies the
    citation; ``repo_id`` (the Hub id the model is pushed to, if any) goes into the usage snippets,
    which otherwise load the folder by ``model_name``, and encode ``info.examples``."""
    # The recipe's final evaluation repeats the last one when training ended on an evaluation step.
    marker = f"eval_{next(iter(method.metrics))}"
    evaluations = list({entry.get("step"): entry for entry in log_history if marker in entry}.values())
    data = ModelCardData(
        language=info.language,
        license=info.license,
        library_name=method.library_name,
        pipeline_tag=method.pipeline_tag,
        tags=sorted({*trainer_tags, *_library_tags(method), *info.tags}),
        base_model=info.hub_base_model,
        datasets=[info.catalog_label] if info.catalog_label else None,
        metrics=list(method.metrics) if evaluations else None,
        model_name=model_name,
        eval_results=_eval_results(evaluations[-1], info, method) if evaluations else None,
    )
    sections = [
        f"---\n{data.to_yaml()}\n---\n",
        f"# {escape_markdown(model_name)}\n",
        _summary(info, method),
        _usage(repo_id or model_name, info.examples, method),
        objective_section,
        "## Training hyperparameters\n\n" + _key_value_table(hyperparameters),
        _loss_table(log_history),
        _evaluation_table(evaluations, info, method),
        "## Framework versions\n\n" + "\n".join(f"- {name}: {_version(name)}" for name in FRAMEWORKS) + "\n",
        f"## Citation\n\n```bibtex\n{method.citation}\n```\n" if method.citation else "",
    ]
    return "\n".join(section for section in sections if section)


def _library_tags(method: CardMethod) -> tuple[str, ...]:
    """The Hub tags of a sentence encoder, for a method whose model is one."""
    if method.library_name != "sentence-transformers":
        return ()
    return ("sentence-transformers", "feature-extraction")


def logged_steps(log_history: list[dict[str, float]]) -> list[dict[str, float]]:
    """The entries of a trainer's log history that record a training step's loss."""
    return [entry for entry in log_history if "loss" in entry and "step" in entry]


def logged_loss_terms(logged: list[dict[str, float]]) -> list[str]:
    """The ``*_loss`` terms of a log, leaving out those that stayed 0 (a term not in the loss)."""
    names = sorted({name for entry in logged for name in entry if name.endswith("_loss")})
    return [name for name in names if any(entry.get(name) for entry in logged)]


def _eval_results(final: dict[str, float], info: ModelCardInfo, method: CardMethod) -> list[EvalResult]:
    label = info.catalog_label or "catalog"
    return [
        EvalResult(
            task_type=method.pipeline_tag,
            task_name=method.task_name,
            dataset_type=label,
            dataset_name=label,
            metric_type=name,
            metric_name=display,
            metric_value=round(float(final[f"eval_{name}"]), 4),
        )
        for name, display in method.metrics.items()
        if f"eval_{name}" in final
    ]


def _summary(info: ModelCardInfo, method: CardMethod) -> str:
    start = (
        f"[{escape_markdown(info.hub_base_model)}](https://huggingface.co/{quote(info.hub_base_model)})"
        if info.hub_base_model
        else "a local checkpoint"
    )
    catalog = escape_markdown(info.catalog_label) if info.catalog_label else "a catalog"
    size = f" ({info.catalog_items:,} items)" if info.catalog_items else ""
    fields = " and ".join(escape_markdown(field) for field in info.text_fields)
    goal = method.goal.format(fields=fields)
    inference = method.inference.format(fields=fields)
    return (
        f"{method.name}: {start} fine-tuned {method.supervised} on {catalog}{size}, {goal}. {inference} "
        "Trained with metricbert-trainer.\n"
    )


# What the snippets encode when the card was written without training data.
PLACEHOLDER_EXAMPLES = ("The title of an item", "The description of an item")


def _usage(model_id: str, examples: Sequence[str], method: CardMethod) -> str:
    # JSON strings are Python string literals too, whatever quotes or backslashes the text holds:
    # the model's name (an output folder's, which a user chose) and the examples enter the code
    # snippets only as literals, never as code; the shell line quotes the name for the shell.
    literals = [json.dumps(text, ensure_ascii=False) for text in (examples or PLACEHOLDER_EXAMPLES)]
    texts, first = ", ".join(literals), literals[0]
    model_literal = json.dumps(model_id, ensure_ascii=False)
    if method.usage is not None:
        return method.usage.format(model_id=model_literal, example=first)
    further = f"`{method.trainer}`" + (
        " / " + _code_span(f"accelerate launch {method.script} --model_name_or_path {shell_word(model_id)}")
        if method.script
        else ""
    )
    return f"""## Usage

With sentence-transformers:

```python
from sentence_transformers import SentenceTransformer

model = SentenceTransformer({model_literal})
embeddings = model.encode([{texts}])
print(model.similarity(embeddings, embeddings))
```

With transformers (the same vectors: mean of the last hidden layer over the real tokens):

```python
import torch
from transformers import AutoModel, AutoTokenizer

tokenizer = AutoTokenizer.from_pretrained({model_literal})
model = AutoModel.from_pretrained({model_literal})
batch = tokenizer([{first}], padding=True, truncation=True, return_tensors="pt")
with torch.no_grad():
    hidden = model(**batch).last_hidden_state
mask = batch["attention_mask"].unsqueeze(-1).float()
embeddings = (hidden * mask).sum(1) / mask.sum(1)
```

To train further (the checkpoint keeps its MLM head), load it with `AutoModelForMaskedLM`, or
with {further}.
"""


def shell_word(text: str) -> str:
    """``text`` as one shell word on one line: ``shlex.quote``'s, or for a text with control
    characters (a line break in a folder's name) bash's ``$'...'`` with them escaped, since a line
    break inside a markdown code span ends its paragraph and a following ``---`` line turns it
    into a heading."""
    if text.isprintable():
        return shlex.quote(text)
    escaped = "".join(
        f"\\{character}" if character in "\\'"
        else character if character.isprintable()
        else f"\\x{ord(character):02x}" if ord(character) < 0x80
        else f"\\u{ord(character):04x}" if ord(character) < 0x10000
        else f"\\U{ord(character):08x}"
        for character in text
    )  # fmt: skip
    return f"$'{escaped}'"


def _code_span(text: str) -> str:
    """``text`` as a markdown code span, fenced by one backtick more than its longest run of them."""
    fence = "`" * (max((len(run) for run in re.findall(r"`+", text)), default=0) + 1)
    padding = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{padding}{text}{padding}{fence}"


def _key_value_table(values: dict[str, object]) -> str:
    rows = [(f"`{name}`", escape_markdown(_value(value))) for name, value in values.items()]
    return markdown_table(["setting", "value"], rows) + "\n"


def _loss_table(log_history: list[dict[str, float]]) -> str:
    logged = logged_steps(log_history)
    if not logged:
        return ""
    loss_terms = [
        *logged_loss_terms(logged),
        *(name for name in LOGGED_STATISTICS if any(name in entry for entry in logged)),
    ]
    if len(logged) > MAX_LOG_ROWS:
        last = len(logged) - 1
        logged = [logged[round(i * last / (MAX_LOG_ROWS - 1))] for i in range(MAX_LOG_ROWS)]
    columns = ["loss", *[term for term in loss_terms if any(term in entry for entry in logged)]]
    rows = [
        [entry["step"], f"{entry.get('epoch', 0):.2f}", *(_number(entry.get(column)) for column in columns)]
        for entry in logged
    ]
    table = markdown_table(["step", "epoch", *columns], rows, align="r" * (len(columns) + 2))
    return "## Training logs\n\nThe loss and each of its terms, as logged during training:\n\n" + table + "\n"


def _evaluation_table(evaluations: list[dict[str, float]], info: ModelCardInfo, method: CardMethod) -> str:
    if not evaluations:
        return ""
    names = [name for name in method.metrics if f"eval_{name}" in evaluations[-1]]
    rows = [
        [
            entry.get("step", ""),
            f"{entry.get('epoch', 0):.2f}",
            *(_number(entry.get(f"eval_{name}")) for name in names),
        ]
        for entry in evaluations
    ]
    headers = ["step", "epoch", *(method.metrics[name] for name in names)]
    table = markdown_table(headers, rows, align="r" * len(headers))
    description = method.evaluation_description.format(
        catalog=info.catalog_label or "the catalog",
        annotations=f" (`{Path(info.annotations).name.replace('`', '')}`)" if info.annotations else "",
    )
    return f"## Evaluation\n\n{description}:\n\n" + table + "\n"


def _number(value: object) -> str:
    return "" if value is None else f"{float(value):.4f}"


def _value(value: object) -> str:
    return json.dumps(value) if isinstance(value, (dict, list)) else str(value)


def _version(distribution: str) -> str:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return "not installed"
