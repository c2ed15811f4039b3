"""How hard each term of the default objective pulls on the encoder, measured on its gradients.

    python benchmarks/gradient_balance.py wines
    python benchmarks/gradient_balance.py debian
    python benchmarks/gradient_balance.py pypi

The default recipe of a benchmark (``recipes/wines/minilm.yaml``, or the catalog recipe on
data/debian or data/pypi) runs ``--steps`` optimizer steps in fp32 with ``log_gradient_norms``: at
every logging step each weighted term (MLM, the metric term, the guard, the teacher) gets its own
backward pass over the encoder and its gradient's L2 norm is logged (``base/gradient_norms.py``).
The table gives the norms at the first logging step and their medians from step 25 on, after the
MLM weight's ramp (20 steps): the balance a training run spends most of its steps in. Issue #36,
item 1. Extra flags after ``--`` go to the recipe (``-- --objective mnrl``): a term the recipe adds
or renames gets its own column.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

from metricbert_trainer.scripts.train import main as train_recipe

REPO_ROOT = Path(__file__).resolve().parents[1]
# Each benchmark's recipe config and the flags that point it at its catalog.
RECIPES = {
    "wines": (REPO_ROOT / "recipes/wines/minilm.yaml", []),
    "debian": (
        REPO_ROOT / "recipes/catalog/minilm.yaml",
        ["--catalog", str(REPO_ROOT / "data/debian/debian-packages-4000.csv")],
    ),
    "pypi": (
        REPO_ROOT / "recipes/catalog/minilm.yaml",
        ["--catalog", str(REPO_ROOT / "data/pypi/pypi-projects-4000.csv")],
    ),
}
# The columns' names, by the logged term (grad_norm_<term>); any other logged term is the metric term.
TERM_NAMES = {"mlm": "MLM", "distill": "guard", "teacher": "teacher"}
AFTER_THE_RAMP = 25


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("benchmark", choices=list(RECIPES))
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("recipe_flags", nargs="*", help="More flags for the recipe, after --.")
    arguments = parser.parse_args()
    config, catalog_flags = RECIPES[arguments.benchmark]
    with tempfile.TemporaryDirectory() as output_dir:
        run = train_recipe(
            [
                *catalog_flags,
                "--output_dir",
                output_dir,
                "--log_gradient_norms",
                "true",
                "--max_steps",
                str(arguments.steps),
                "--logging_steps",
                "5",
                "--save_strategy",
                "no",
                "--eval_on_start",
                "false",
                "--annotations",
                "",
                "--report_to",
                "none",
                "--disable_tqdm",
                "true",
                "--cpu_bf16",
                "false",
                "--seed",
                str(arguments.seed),
                *arguments.recipe_flags,
            ],
            default_config=config,
        )
    logged = [entry for entry in run.trainer.state.log_history if "grad_norm_mlm" in entry]
    late = [entry for entry in logged if entry["step"] >= AFTER_THE_RAMP]
    terms = [key for key in logged[0] if key.startswith("grad_norm_")]
    names = [
        TERM_NAMES.get(key.removeprefix("grad_norm_"), f"metric term ({key.removeprefix('grad_norm_')})")
        for key in terms
    ]
    print(
        f"\n{arguments.benchmark}, seed {arguments.seed}, {arguments.steps} steps; gradient L2 norms on the encoder\n"
    )
    print("| steps | whole step | " + " | ".join(names) + " |\n|---|" + "---:|" * (1 + len(names)))
    first = logged[0]
    print(f"| {first['step']} | " + " | ".join(f"{first[key]:.3f}" for key in ("grad_norm", *terms)) + " |")
    medians = [statistics.median(entry[key] for entry in late) for key in ("grad_norm", *terms)]
    print(
        f"| median of {AFTER_THE_RAMP}-{arguments.steps} | "
        + " | ".join(f"{value:.3f}" for value in medians)
        + " |"
    )


if __name__ == "__main__":
    main()
