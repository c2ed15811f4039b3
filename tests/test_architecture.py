"""The package's layering (docs/architecture.md), checked on every module's imports so it cannot drift.

Each folder of the package is a layer (``errors.py``, the one module beside them, is one too), and
a folder imports only the folders below it in ``ALLOWED``: no exception for single modules, and no
folder cycle, which the second test finds on the imports themselves whatever the table says.
Imports inside functions count too.
"""

from __future__ import annotations

import ast
import graphlib
from collections import defaultdict
from pathlib import Path

import pytest
from conftest import REPO_ROOT

PACKAGE = REPO_ROOT / "metricbert_trainer"
# What each folder may import besides itself, from the bottom of the drawing up.
BELOW_THE_METHODS = frozenset({"errors", "data", "base", "evaluation", "publishing", "training"})
ALLOWED = {
    "errors": frozenset(),
    "data": frozenset({"errors"}),
    "base": frozenset({"errors"}),
    "evaluation": frozenset({"errors", "data", "base"}),
    "publishing": frozenset({"errors", "data", "base", "evaluation"}),
    "training": frozenset({"errors", "data", "base", "evaluation", "publishing"}),
    "metricbert": BELOW_THE_METHODS,
    "recobert": BELOW_THE_METHODS,
    # Multi-task NER takes its metric term from MetricBERT's loss family.
    "ner": BELOW_THE_METHODS | {"metricbert"},
    # The two top folders may import every folder below them, and never each other.
    "scripts": BELOW_THE_METHODS | {"metricbert", "recobert", "ner"},
    "cli": BELOW_THE_METHODS | {"metricbert", "recobert", "ner"},
}


def folder_of(package: Path, path: Path) -> str | None:
    """The folder (layer) of the module at ``path``; None for the package's own ``__init__``."""
    parts = path.relative_to(package).with_suffix("").parts
    return None if parts == ("__init__",) else parts[0]


def imported_folders(path: Path, package_name: str = "metricbert_trainer") -> set[tuple[str, int]]:
    """The folders of ``package_name`` that the module at ``path`` imports, with each import's line."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module:
            modules = [node.module]
            if node.module == package_name:
                modules = [f"{package_name}.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        else:
            continue
        for module in modules:
            parts = module.split(".")
            if parts[0] == package_name and len(parts) > 1:
                found.add((parts[1], node.lineno))
    return found


def folder_imports(package: Path) -> dict[str, dict[str, list[str]]]:
    """For each folder of ``package``, the other folders it imports, each with the places that do."""
    graph: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    for path in sorted(package.rglob("*.py")):
        source = folder_of(package, path)
        if source is None:
            continue  # the package's __init__ re-exports the public names of every layer
        graph[source]  # a folder that imports no other is a node all the same
        for target, line in imported_folders(path, package.name):
            if target != source:
                graph[source][target].append(f"{path.relative_to(package.parent)}:{line}")
    return graph


def folder_cycle(graph: dict[str, dict[str, list[str]]]) -> list[str]:
    """A cycle of folders importing one another (empty when there is none)."""
    try:
        graphlib.TopologicalSorter({folder: set(targets) for folder, targets in graph.items()}).prepare()
    except graphlib.CycleError as error:
        return list(error.args[1])
    return []


def test_every_folder_is_a_layer():
    folders = {path.parent.name for path in PACKAGE.glob("*/__init__.py")}
    assert folders == set(ALLOWED) - {"errors"}
    # errors.py, the user-mistake exceptions every layer raises, is the one module beside them.
    assert not [
        path.name for path in PACKAGE.glob("*.py") if path.name not in ("__init__.py", "errors.py")
    ], "modules belong in a folder (docs/architecture.md)"


def test_no_folder_imports_a_folder_above_it():
    violations = [
        f"{place}: {source} imports {target}"
        for source, targets in folder_imports(PACKAGE).items()
        for target, places in targets.items()
        if target not in ALLOWED[source]
        for place in places
    ]
    assert not violations, "\n".join(violations)


def test_the_folders_import_one_another_without_a_cycle():
    graph = folder_imports(PACKAGE)
    cycle = folder_cycle(graph)
    assert not cycle, " -> ".join(cycle) + "\n" + "\n".join(graph[cycle[0]][cycle[1]])


def test_the_checks_see_a_forbidden_import_and_a_folder_cycle(tmp_path):
    package = tmp_path / "metricbert_trainer"
    for folder, source in {
        "base": "def f():\n    from metricbert_trainer.training.trainer import CatalogTrainer\n",
        "training": "from metricbert_trainer import base\n",
    }.items():
        (package / folder).mkdir(parents=True)
        (package / folder / "__init__.py").write_text("")
        (package / folder / "module.py").write_text(source)
    graph = folder_imports(package)
    assert {folder: dict(targets) for folder, targets in graph.items()} == {
        "base": {"training": ["metricbert_trainer/base/module.py:2"]},
        "training": {"base": ["metricbert_trainer/training/module.py:1"]},
    }
    assert "training" not in ALLOWED["base"]
    assert sorted(folder_cycle(graph)) == ["base", "base", "training"]
    del graph["base"]["training"]
    assert folder_cycle(graph) == []
    assert "metricbert" not in ALLOWED["training"] | ALLOWED["recobert"]
    assert "ner" not in ALLOWED["metricbert"] | ALLOWED["recobert"]


# The recipes' runner: what ``recipes/*.py`` run, and the page of their options.
RUNNER_MODULES = {"__init__", "arguments", "ner", "options_page", "output_lock", "preflight", "run", "train"}


def private_names_used(path: Path) -> list[str]:
    """Each ``_name`` that the module at ``path`` imports from the package or calls on an object
    (``trainer._method()``), with its line: what studies and benchmarks must not reach for."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("metricbert_trainer"):
            parts = [*node.module.split("."), *(alias.name for alias in node.names)]
            found += [f"{path.name}:{node.lineno}: {name}" for name in parts if name.startswith("_")]
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            name, owner = node.func.attr, node.func.value
            if (
                name.startswith("_")
                and not name.startswith("__")
                and not (isinstance(owner, ast.Name) and owner.id in {"self", "cls", "sys", "os"})
            ):
                found.append(f"{path.name}:{node.lineno}: {name}")
    return found


def test_the_package_holds_the_product_and_studies_use_its_public_names():
    """Studies and benchmarks live beside the package (``studies/``, ``benchmarks/``; not
    installed), and use what a user may use: no private module, function or method of it."""
    assert {path.stem for path in (PACKAGE / "scripts").glob("*.py")} == RUNNER_MODULES
    outside = [*(REPO_ROOT / "studies").glob("*.py"), *(REPO_ROOT / "benchmarks").rglob("*.py")]
    assert len(outside) > 20
    assert not [found for path in outside for found in private_names_used(path)]
    studies = {path.stem for path in (REPO_ROOT / "studies").glob("*.py")} | {"studies"}
    assert not [
        f"{path.relative_to(REPO_ROOT)}: {name}"
        for path in PACKAGE.rglob("*.py")
        for name in top_level_imports(path)
        if name in studies
    ], "the package imports a study"


def top_level_imports(path: Path) -> set[str]:
    """The first name of every absolute module the module at ``path`` imports."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module.split(".")[0])
        elif isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
    return names


def test_the_public_names_check_sees_a_private_name(tmp_path):
    module = tmp_path / "study.py"
    module.write_text(
        "from metricbert_trainer.metricbert.trainer import _private\n"
        "from metricbert_trainer._hidden import name\n"
        "batches = trainer._warmup_loader()\n"
        "self._own(); sys._getframe()\n"
    )
    assert private_names_used(module) == [
        "study.py:1: _private",
        "study.py:2: _hidden",
        "study.py:3: _warmup_loader",
    ]


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
