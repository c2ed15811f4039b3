"""The values each trainer option accepts, declared once beside the options and checked in one place.

A config class lists the ranges of its numeric options in ``option_ranges`` (a class attribute
next to its fields); an option whose type is an ``Enum`` takes that Enum's values. ``check_options``
reads both for every option the class and its parents declare (transformers' own options are
transformers' business), so a new option gets its check by being declared, and every message reads
alike: ``margin must be >= 0; got -0.1.`` The options page shows the same ranges
(``scripts.options_page``).

The ranges sit in a class attribute rather than in each field's metadata because
``HfArgumentParser`` hands a field's metadata to ``argparse.add_argument`` as keyword arguments.
"""

from __future__ import annotations

import dataclasses
import math
import typing
from dataclasses import dataclass
from enum import Enum


@dataclass(frozen=True)
class Range:
    """The numbers an option accepts: above ``low`` and below ``high`` (either may be ``None``),
    each bound included unless it is open. ``None`` as a value is always accepted (unset)."""

    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False

    def accepts(self, value: float) -> bool:
        if self.low is not None and (value < self.low or (self.low_open and value == self.low)):
            return False
        if self.high is not None and (value > self.high or (self.high_open and value == self.high)):
            return False
        return value == value  # NaN is in no range

    def __str__(self) -> str:
        if self.high is None:
            return f"> {self.low}" if self.low_open else f">= {self.low}"
        if self.low is None:
            return f"< {self.high}" if self.high_open else f"<= {self.high}"
        return f"in {'(' if self.low_open else '['}{self.low}, {self.high}{')' if self.high_open else ']'}"


def at_least(low: float) -> Range:
    return Range(low=low)


def above(low: float) -> Range:
    return Range(low=low, low_open=True)


def within(low: float, high: float, *, low_open: bool = False, high_open: bool = False) -> Range:
    return Range(low=low, high=high, low_open=low_open, high_open=high_open)


def checked_choice(enum_type: type[Enum], value, name: str):
    """``value`` as a member of ``enum_type``; an unknown value is a ``ValueError`` listing the valid ones."""
    try:
        return enum_type(value.value if isinstance(value, enum_type) else value)
    except ValueError:
        valid = ", ".join(member.value for member in enum_type)
        raise ValueError(f"Unknown {name} {value!r}; valid choices: {valid}.") from None


def own_options(config_class: type, root: type) -> list[str]:
    """The options ``config_class`` and its parents up to ``root`` declare themselves, in order."""
    names: list[str] = []
    for cls in reversed(config_class.__mro__):
        if isinstance(cls, type) and issubclass(cls, root):
            names += [name for name in cls.__dict__.get("__annotations__", {}) if name not in names]
    return names


def option_range(config_class: type, name: str) -> Range | None:
    """The range ``config_class`` (or the nearest parent that names it) declares for ``name``."""
    for cls in config_class.__mro__:
        found = cls.__dict__.get("option_ranges", {}).get(name)
        if found is not None:
            return found
    return None


def check_options(config, root: type) -> None:
    """Turns each Enum-typed option of ``config`` (declared by its class or a parent up to ``root``)
    into its member and checks each ranged one; the first wrong value is a ``ValueError``."""
    hints = typing.get_type_hints(type(config))
    declared = set(own_options(type(config), root))
    for option in dataclasses.fields(config):
        if option.name not in declared:
            continue
        value = getattr(config, option.name)
        kind = hints.get(option.name)
        if isinstance(kind, type) and issubclass(kind, Enum):
            setattr(config, option.name, checked_choice(kind, value, option.name))
            continue
        bounds = option_range(type(config), option.name)
        if bounds is None or value is None:
            continue
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError(f"{option.name} must be a finite number; got {value}.")
        if not bounds.accepts(value):
            raise ValueError(f"{option.name} must be {bounds}; got {value}.")
