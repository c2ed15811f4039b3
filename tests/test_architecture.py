"""The package's layering (docs/architecture.md), checked on every module's imports so it cannot drift.

Each module belongs to a layer: its subpackage, except that ``base/trainer.py`` and
``base/config.py`` (the shared trainer and its config) sit above ``evaluation`` and
``publishing``, which the rest of ``base`` (the primitives) must not reach. Imports inside
functions count too.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from conftest import REPO_ROOT

PACKAGE = REPO_ROOT / "metricbert_trainer"
TRAINER_MODULES = {"trainer", "config"}  # of base/
LAYERS = (
    "errors",
    "data",
    "base",
    "evaluation",
    "publishing",
    "base.trainer",
    "metricbert",
    "recobert",
    "ner",
    "scripts",
    "cli",
)
# What each layer may import besides itself.
EVERY_LAYER_BELOW_THE_COMMANDS = frozenset(
    {"errors", "data", "base", "base.trainer", "evaluation", "publishing", "metricbert", "recobert", "ner"}
)
ALLOWED = {
    "errors": set(),
    "data": {"errors"},
    "base": {"errors"},
    "evaluation": {"errors", "data", "base"},
    "publishing": {"errors", "data", "base", "evaluation"},
    "base.trainer": {"errors", "data", "base", "evaluation", "publishing"},
    "metricbert": {"errors", "data", "base", "base.trainer", "evaluation", "publishing"},
    "recobert": {"errors", "data", "base", "base.trainer", "evaluation", "publishing"},
    # Multi-task NER takes its metric term from MetricBERT's loss family.
    "ner": {"errors", "data", "base", "base.trainer", "evaluation", "publishing", "metricbert"},
    # The two top layers may import every layer below them, and never each other.
    "scripts": EVERY_LAYER_BELOW_THE_COMMANDS,
    "cli": EVERY_LAYER_BELOW_THE_COMMANDS,
}


def layer_of(parts: list[str]) -> str | None:
    """The layer of ``metricbert_trainer.<parts>``; None for the package's own ``__init__``."""
    if not parts or parts == ["__init__"]:
        return None
    if parts[0] == "base" and len(parts) > 1 and parts[1] in TRAINER_MODULES:
        return "base.trainer"
    return parts[0]


def imported_layers(path: Path) -> set[tuple[str, int]]:
    """The layers ``path`` imports from, with the line of each import."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module:
            modules = [node.module]
            if node.module == "metricbert_trainer":
                modules = [f"metricbert_trainer.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        else:
            continue
        for module in modules:
            parts = module.split(".")
            if parts[0] == "metricbert_trainer" and len(parts) > 1:
                found.add((layer_of(parts[1:]), node.lineno))
    return found


def test_every_subpackage_has_a_layer():
    subpackages = {path.parent.name for path in PACKAGE.glob("*/__init__.py")}
    assert subpackages == {layer for layer in LAYERS if "." not in layer} - {"errors"}
    # errors.py, the user-mistake exceptions every layer raises, is the one module beside them.
    assert not [
        path.name for path in PACKAGE.glob("*.py") if path.name not in ("__init__.py", "errors.py")
    ], "modules belong in a subpackage (docs/architecture.md)"


def test_modules_import_only_the_layers_below_them():
    violations = []
    for path in sorted(PACKAGE.rglob("*.py")):
        source = layer_of(list(path.relative_to(PACKAGE).with_suffix("").parts))
        if source is None:
            continue  # the package's __init__ re-exports the public names of every layer
        for target, line in imported_layers(path):
            if target != source and target not in ALLOWED[source]:
                violations.append(f"{path.relative_to(REPO_ROOT)}:{line}: {source} imports {target}")
    assert not violations, "\n".join(violations)


def test_the_check_sees_a_forbidden_import(tmp_path):
    module = tmp_path / "module.py"
    module.write_text("def f():\n    from metricbert_trainer.metricbert.trainer import MetricBertTrainer\n")
    assert imported_layers(module) == {("metricbert", 2)}
    assert "metricbert" not in ALLOWED["base.trainer"] | ALLOWED["recobert"]
    assert "ner" not in ALLOWED["metricbert"] | ALLOWED["recobert"]


def test_importing_every_module_leaves_the_plotting_backend_alone():
    """A notebook user's matplotlib backend is theirs: no module chooses one when imported (the
    plots draw on ``Figure`` objects). Run in a fresh interpreter whose backend is svg, which a
    ``matplotlib.use("Agg")`` anywhere in the package would replace."""
    import os
    import subprocess
    import sys

    script = (
        "import importlib, pkgutil, matplotlib, metricbert_trainer\n"
        "before = matplotlib.get_backend()\n"
        "for module in pkgutil.walk_packages(metricbert_trainer.__path__, 'metricbert_trainer.'):\n"
        "    if not module.name.endswith('__main__'):  # runs the command line\n"
        "        importlib.import_module(module.name)\n"
        "print(before, matplotlib.get_backend())\n"
    )
    environment = {**os.environ, "MPLBACKEND": "svg"}
    result = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        env=environment,
        cwd=REPO_ROOT,
        check=True,
    )
    assert result.stdout.split() == ["svg", "svg"]


def test_a_data_module_imports_without_the_trainer_and_every_public_name_resolves():
    """The package's public names are imported on first use: a data set's build script, which
    imports ``metricbert_trainer.data.evaluation_sets``, starts without torch and transformers
    (most of a short script's time); every name of ``__all__`` still resolves."""
    import subprocess
    import sys

    import metricbert_trainer

    script = (
        "import sys, metricbert_trainer.data.evaluation_sets\n"
        "print(sorted(name for name in ('torch', 'transformers') if name in sys.modules))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, cwd=REPO_ROOT, check=True
    )
    assert result.stdout.strip() == "[]"
    for name in metricbert_trainer.__all__:
        assert getattr(metricbert_trainer, name).__name__ == name and name in dir(metricbert_trainer)
    with pytest.raises(AttributeError, match="no attribute 'Trainer'"):
        metricbert_trainer.Trainer  # noqa: B018
