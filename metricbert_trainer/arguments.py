"""Recipe arguments: a YAML config file with command-line overrides, parsed into dataclasses.

``--config recipes/wines/minilm.yaml --learning_rate 3e-5`` reads the YAML first and lets any flag
override it, the way trl's and the alignment-handbook's recipes behave. Unknown keys in the YAML
are errors that list the valid ones, so a misspelt hyperparameter never passes silently.
"""

from __future__ import annotations

import argparse
import difflib
import sys
from collections.abc import Sequence
from pathlib import Path

import yaml
from transformers import HfArgumentParser

from .usage_errors import UsageError


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
    parser.add_argument(
        "--config", default=None, help="YAML recipe; flags given after it override its values."
    )
    if config_path is not None:
        parser.set_defaults(**read_config(config_path, parser))
    values = parser.parse_args_into_dataclasses(remaining, return_remaining_strings=False)
    return values[: len(dataclass_types)]


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
