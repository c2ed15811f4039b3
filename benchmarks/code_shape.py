"""The shape of the package's code, as issue #39 asks to report it: the longest function, the
median function length, and the private ``Trainer`` methods the package's trainers override.

Lengths count a function's lines from its ``def`` to its last line, docstring included, nested
functions inside their enclosing one. A private override is a method whose name starts with one
underscore, is defined on a class of the package that derives from ``transformers.Trainer``, and
also exists on ``Trainer`` itself (a helper of our own with a private name is not an override).

    python benchmarks/code_shape.py                     # the working tree's package
    python benchmarks/code_shape.py --root /tmp/old     # another checkout, e.g. for "before"
"""

from __future__ import annotations

import argparse
import ast
import statistics
from pathlib import Path

from transformers import Trainer


def functions(tree: ast.AST) -> list[ast.FunctionDef | ast.AsyncFunctionDef]:
    """Every top-level function and method, not the functions nested inside them."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef):
            found += [
                child for child in node.body if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef)
            ]
    return found


def private_trainer_overrides(tree: ast.AST) -> list[str]:
    """``Class._method`` for each private ``Trainer`` method a class of this module redefines."""
    overrides = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.ClassDef):
            continue
        for child in node.body:
            name = getattr(child, "name", "")
            private = name.startswith("_") and not name.startswith("__")
            if isinstance(child, ast.FunctionDef) and private and hasattr(Trainer, name):
                overrides.append(f"{node.name}.{name}")
    return overrides


def trainer_classes(package: Path) -> set[str]:
    """Names of the package's classes that derive, directly or through each other, from Trainer,
    and of the mixins they derive from (``StagedCheckpoints``): their methods override Trainer's."""
    bases: dict[str, list[str]] = {}
    for path in package.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef):
                bases[node.name] = [getattr(base, "id", getattr(base, "attr", "")) for base in node.bases]
    derived = {"Trainer"}
    changed = True
    while changed:
        changed = False
        for name, parents in bases.items():
            if name not in derived and derived.intersection(parents):
                derived.add(name)
                changed = True
    mixins = {parent for name in derived for parent in bases.get(name, []) if parent in bases}
    return (derived | mixins) - {"Trainer"}


def code_shape(package: Path) -> dict[str, object]:
    lengths: list[tuple[int, str]] = []
    overrides: list[str] = []
    trainers = trainer_classes(package)
    for path in sorted(package.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        relative = path.relative_to(package.parent)
        for function in functions(tree):
            lengths.append((function.end_lineno - function.lineno + 1, f"{relative}:{function.name}"))
        overrides += [
            f"{relative}:{name}" for name in private_trainer_overrides(tree) if name.split(".")[0] in trainers
        ]
    longest = max(lengths)
    return {
        "functions": len(lengths),
        "median_function_lines": statistics.median(length for length, _ in lengths),
        "longest_function": f"{longest[1]} ({longest[0]} lines)",
        "private_trainer_overrides": len(overrides),
        "overrides": overrides,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parents[1])
    options = parser.parse_args()
    shape = code_shape(options.root / "metricbert_trainer")
    for key, value in shape.items():
        if key == "overrides":
            for override in value:
                print(f"  {override}")
        else:
            print(f"{key}: {value}")


if __name__ == "__main__":
    main()
