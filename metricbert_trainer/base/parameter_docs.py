"""Grouped ``Parameters:`` docstrings for the configuration dataclasses, written from their fields.

trl documents each config class with a ``Parameters:`` section in groups; written by hand beside
the fields' help text, the two drift. Here the help text in each field's metadata is the only
source: ``documented_parameters`` appends the section to the class's docstring when the class is
defined, so ``help(MetricBertConfig)``, ``--help`` and ``docs/options.md`` (``scripts.options_page``)
say the same thing, in the same groups.
"""

from __future__ import annotations

import dataclasses
import enum
import inspect
import textwrap
from collections.abc import Callable


def own_fields(config: type) -> list[dataclasses.Field]:
    """The fields ``config`` declares or redeclares (its parents', and TrainingArguments', excluded
    unless their default or help changes here)."""
    parents = [base for base in config.__mro__[1:] if dataclasses.is_dataclass(base)]
    inherited = {}
    for base in reversed(parents):  # the nearest parent's declaration last, so it wins
        inherited.update({option.name: option for option in dataclasses.fields(base)})
    return [
        option
        for option in dataclasses.fields(config)
        if option.name not in inherited
        or (option.default, option.metadata.get("help"))
        != (inherited[option.name].default, inherited[option.name].metadata.get("help"))
    ]


def default_value(option: dataclasses.Field) -> object:
    """The field's default as a user writes it (an enum by its value), ``dataclasses.MISSING`` if
    the field is required."""
    if option.default_factory is not dataclasses.MISSING:
        value = option.default_factory()
    else:
        value = option.default
    return value.value if isinstance(value, enum.Enum) else value


def help_text(option: dataclasses.Field) -> str:
    return " ".join(option.metadata.get("help", "").split())


def grouped_fields(config: type) -> list[tuple[str, list[dataclasses.Field]]]:
    """``config``'s own fields in its ``parameter_groups`` (heading -> field names), in order."""
    fields = {option.name: option for option in own_fields(config)}
    return [(heading, [fields[name] for name in names]) for heading, names in config.parameter_groups.items()]


def _type_name(option: dataclasses.Field) -> str:
    return option.type if isinstance(option.type, str) else getattr(option.type, "__name__", str(option.type))


def _parameter_entry(option: dataclasses.Field) -> str:
    default = default_value(option)
    qualifier = "required" if default is dataclasses.MISSING else f"*optional*, defaults to `{default!r}`"
    body = textwrap.fill(help_text(option), width=92, initial_indent="        ", subsequent_indent="        ")
    return f"    {option.name} (`{_type_name(option)}`, {qualifier}):\n{body}"


def documented_parameters(groups: dict[str, tuple[str, ...]]) -> Callable[[type], type]:
    """Class decorator (above ``@dataclass``): records ``groups`` as ``parameter_groups`` and
    appends the grouped ``Parameters:`` section to the docstring.

    Every field the class declares or redeclares must be in exactly one group, so a new option
    cannot go undocumented; the check runs when the class is defined.
    """

    def decorate(config: type) -> type:
        declared = [option.name for option in own_fields(config)]
        grouped = [name for names in groups.values() for name in names]
        if sorted(declared) != sorted(grouped):
            missing = sorted(set(declared) - set(grouped))
            extra = sorted(set(grouped) - set(declared))
            repeated = sorted({name for name in grouped if grouped.count(name) > 1})
            raise TypeError(
                f"{config.__name__}.parameter_groups must list each own field once: missing {missing}, "
                f"not fields {extra}, repeated {repeated}."
            )
        config.parameter_groups = groups
        sections = []
        for heading, fields in grouped_fields(config):
            entries = "\n\n".join(_parameter_entry(option) for option in fields)
            sections.append(f"    > {heading}\n\n{entries}")
        parameters = "Parameters:\n\n" + "\n\n".join(sections)
        config.__doc__ = f"{inspect.cleandoc(config.__doc__ or '')}\n\n{parameters}\n"
        return config

    return decorate
