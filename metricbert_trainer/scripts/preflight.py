"""Checking what a recipe was asked to do before anything loads: numbers, files, the output folder.

A mistake found after the model and the catalog have loaded costs minutes, and one found by torch
or ``os`` (``Invalid learning rate: nan``, a bare ``FileExistsError``) reads as a crash. Everything
that the arguments alone can tell is checked here first. Every process of a launch runs the same
checks on the same arguments and files, so they reach the same verdict and all stop together,
before any of them waits on a collective that another has left.
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import huggingface_hub
import torch
from transformers import TrainingArguments, get_scheduler
from transformers.integrations import get_available_reporting_integrations
from transformers.trainer import TRAINER_STATE_NAME
from transformers.trainer_utils import get_last_checkpoint

from metricbert_trainer.base.checkpoints import resumes
from metricbert_trainer.base.model_folders import model_folder_problem
from metricbert_trainer.base.modeling import resolve_model_name
from metricbert_trainer.data.input_files import input_file_problem
from metricbert_trainer.data.output_files import output_folder_content_problems, unwritable_problem
from metricbert_trainer.errors import UsageError
from metricbert_trainer.evaluation.label_free import signal_names
from metricbert_trainer.evaluation.metrics import ranking_metric_names
from metricbert_trainer.training.config import CatalogTrainerConfig

# TrainingArguments fields whose bad values torch, numpy or the Trainer reject only later, with
# their own wording: (name, lower bound, whether the bound itself is allowed, upper bound or None).
_TRAINING_RANGES: tuple[tuple[str, float, bool, float | None], ...] = (
    ("learning_rate", 0.0, False, None),
    ("weight_decay", 0.0, True, None),
    ("adam_beta1", 0.0, True, 1.0),
    ("adam_beta2", 0.0, True, 1.0),
    ("adam_epsilon", 0.0, True, None),
    ("max_grad_norm", 0.0, True, None),
    ("warmup_steps", 0.0, True, None),
    ("per_device_train_batch_size", 1, True, None),
    ("per_device_eval_batch_size", 1, True, None),
    ("gradient_accumulation_steps", 1, True, None),
    ("logging_steps", 0.0, False, None),
    ("dataloader_num_workers", 0, True, None),
    ("seed", 0, True, 2**32),
)


def check_recipe_arguments(
    model_args, data_args, training_args: TrainingArguments, label_free_selection: bool = True
) -> None:
    """Raises one ``UsageError`` naming every problem found in a recipe's arguments.

    ``label_free_selection``: whether the trainer logs the label-free signals on held-out items
    (``label_free``), which makes evaluation possible without annotations.
    """
    problems = [
        *nonfinite_numbers(model_args, data_args, training_args),
        *training_range_problems(training_args),
        *objective_problems(training_args),
        *evaluation_problems(data_args, training_args, label_free_selection),
        *publishing_problems(training_args),
        *input_file_problems(data_args),
        *model_path_problems(model_args.model_name_or_path),
        *output_folder_problems(training_args),
        *starting_model_problems(model_args, training_args),
        *resume_problems(training_args),
    ]
    raise_problems(problems)


def files_read(model_args, data_args, training_args: TrainingArguments) -> list[str]:
    """The files and folders a run reads: its catalog, annotations or tagged catalog, its starting
    model's folder (a local one) and the checkpoint it resumes from (a named one). No removal of an
    earlier run may touch them (``output_lock``)."""
    named = [getattr(data_args, name, None) for name in ("catalog", "annotations", "tagged_catalog")]
    model = resolve_model_name(model_args.model_name_or_path)
    resume = training_args.resume_from_checkpoint
    named += [
        model if Path(model).exists() else None,
        resume if isinstance(resume, str) and resume != "last" else None,
    ]
    return [str(path) for path in named if path]


def starting_model_problems(model_args, training_args: TrainingArguments) -> list[str]:
    """A run writes its model into ``output_dir``: a starting model in that folder would be
    written over by the model trained from it."""
    model = Path(resolve_model_name(model_args.model_name_or_path)).expanduser()
    output_dir = Path(training_args.output_dir or ".").expanduser()
    if not model.exists() or not training_args.output_dir:
        return []
    model, output_dir = model.resolve(), output_dir.resolve()
    if model == output_dir or output_dir in model.parents:
        return [
            f"output_dir {training_args.output_dir} holds the model the run starts from (model_name_or_path "
            f"{model_args.model_name_or_path}), which the trained model would be written over: name another "
            "output_dir, or copy the starting model elsewhere first"
        ]
    return []


def check_tagging_arguments(model_args, data_args, training_args: TrainingArguments) -> None:
    """The checks of ``check_recipe_arguments`` that a multi-task NER recipe's arguments take:
    its tagged catalog is its one input file, and it evaluates on its own held-out titles."""
    raise_problems(
        [
            *nonfinite_numbers(model_args, data_args, training_args),
            *training_range_problems(training_args),
            *objective_problems(training_args),
            *filter(None, [input_file_problem(data_args.tagged_catalog, "tagged_catalog")]),
            *model_path_problems(model_args.model_name_or_path),
            *output_folder_problems(training_args),
            *starting_model_problems(model_args, training_args),
            *resume_problems(training_args),
        ]
    )


def raise_problems(problems: list[str]) -> None:
    """One ``UsageError`` naming every problem, when there is any."""
    if problems:
        raise UsageError(problems[0] if len(problems) == 1 else "; ".join(problems))


def nonfinite_numbers(*argument_sets) -> list[str]:
    """A problem for every float option that is NaN or infinite."""
    problems = []
    for arguments in argument_sets:
        for option in dataclasses.fields(arguments):
            value = getattr(arguments, option.name, None)
            if isinstance(value, float) and not math.isfinite(value):
                problems.append(f"{option.name} must be a finite number; got {value}")
    return problems


def training_range_problems(training_args: TrainingArguments) -> list[str]:
    """Out-of-range optimizer, batch and schedule settings (NaN is reported by ``nonfinite_numbers``)."""
    problems = []
    for name, low, low_allowed, high in _TRAINING_RANGES:
        value = getattr(training_args, name, None)
        if value is None or (isinstance(value, float) and math.isnan(value)):
            continue
        if value < low or (value == low and not low_allowed) or (high is not None and value >= high):
            bound = f">= {low}" if low_allowed else f"> {low}"
            if high is not None:
                bound += f" and < {high}"
            problems.append(f"{name} must be {bound}; got {value}")
    if training_args.max_steps == 0 or training_args.max_steps < -1:
        # The Trainer reads 0 and -5 as "no cap" in one place and as the step count in another: a
        # run of 0 steps trained one step at learning rate 0 and was published as fine-tuned.
        problems.append(
            f"max_steps must be > 0 to cap the run, or -1 (the default) to train num_train_epochs; "
            f"got {training_args.max_steps}"
        )
    elif training_args.max_steps < 0 and not training_args.num_train_epochs > 0:
        problems.append(
            f"num_train_epochs must be > 0 (or max_steps > 0); got {training_args.num_train_epochs}"
        )
    return problems


def objective_problems(training_args: CatalogTrainerConfig) -> list[str]:
    """A run with every loss weight at 0, or a term that learns from the batch's other items on
    batches too small to hold them, would log 0 at every step while the run reported a trained model."""
    weights = training_args.loss_weights()
    if not any(weights.values()):
        return [
            f"every loss term is off ({', '.join(f'{name} 0' for name in weights)}): the run would train nothing"
        ]
    pool = training_args.per_device_train_batch_size
    if getattr(training_args, "gather_across_devices", False):
        pool *= training_args.world_size
    return [
        f"per_device_train_batch_size {training_args.per_device_train_batch_size} leaves the {term} term nothing to "
        f"train: it learns from the other items of a batch, and needs batches of at least {fewest} items; use at "
        f"least {fewest} (or {term}: 0 to train without that term)"
        for term, fewest in training_args.in_batch_terms().items()
        if pool < fewest
    ]


def check_schedule(training_args: CatalogTrainerConfig, train_items: int) -> None:
    """Raises ``UsageError`` when the learning-rate schedule gives every optimizer step of the run a
    learning rate of 0 (``num_train_epochs: 0.001``, or a warm-up as long as the run): the model
    would be saved unchanged and published as trained; or when the checkpoint it resumes from
    leaves it no step (``check_resume_leaves_steps``). Needs the number of training items, so it
    runs once the catalog is read, before the model loads."""
    check_resume_leaves_steps(training_args, train_items)
    steps = optimizer_steps(training_args, train_items)
    warmup_steps = training_args.get_warmup_steps(steps)
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=training_args.learning_rate)
    scheduler = get_scheduler(
        training_args.lr_scheduler_type,
        optimizer,
        num_warmup_steps=warmup_steps,
        num_training_steps=steps,
        scheduler_specific_kwargs=training_args.lr_scheduler_kwargs,
    )
    for _ in range(steps):
        if scheduler.get_last_lr()[0] > 0:
            return
        optimizer.step()
        scheduler.step()
    raise UsageError(
        f"the run has {steps} optimizer step(s) ({train_items} training items, num_train_epochs "
        f"{training_args.num_train_epochs}, max_steps {training_args.max_steps}) and the {training_args.lr_scheduler_type} "
        f"schedule with {warmup_steps} warm-up step(s) gives every one of them learning rate 0, "
        "so the model would not change: train for more steps, or warm up for fewer"
    )


def check_resume_leaves_steps(training_args: CatalogTrainerConfig, train_items: int) -> None:
    """Raises ``UsageError`` when the checkpoint a run resumes from is already at or past the run's
    last step: the Trainer would train 0 steps and save that checkpoint's model as this run's,
    fine-tuned on this catalog by its card (another run's, on another catalog, say)."""
    value = training_args.resume_from_checkpoint
    if not resumes(value):
        return
    if str(value).strip().lower() in ("last", "latest", "true"):
        folder = Path(training_args.output_dir)
        checkpoint = get_last_checkpoint(str(folder)) if folder.is_dir() else None
        if checkpoint is None:
            return
    else:
        checkpoint = value
    try:
        state = json.loads((Path(checkpoint) / TRAINER_STATE_NAME).read_text(encoding="utf-8"))
        done = int(state["global_step"])
    except (OSError, ValueError, KeyError, TypeError):
        return  # resume_problems has named a damaged checkpoint already
    steps = optimizer_steps(training_args, train_items)
    if done >= steps:
        raise UsageError(
            f"resume_from_checkpoint {checkpoint} is at step {done}, and this run ends at step {steps} "
            f"({train_items} training items, num_train_epochs {training_args.num_train_epochs}, max_steps "
            f"{training_args.max_steps}): it would train nothing and save that checkpoint's model as this run's. "
            f"Set max_steps above {done} to train on from it, or start afresh without resume_from_checkpoint"
        )


def optimizer_steps(training_args: TrainingArguments, train_items: int) -> int:
    """How many optimizer steps the Trainer will take over ``train_items`` items, as it counts them."""
    if training_args.max_steps > 0:
        return training_args.max_steps
    batches = math.ceil(train_items / (training_args.per_device_train_batch_size * training_args.world_size))
    accumulation = training_args.gradient_accumulation_steps
    per_epoch = max(batches // accumulation + int(batches % accumulation > 0), 1)
    return max(math.ceil(training_args.num_train_epochs * per_epoch), 1)


def evaluation_problems(data_args, training_args: TrainingArguments, label_free_selection: bool) -> list[str]:
    """Evaluation needs something to evaluate on, and a best model needs a metric that is logged."""
    available = []
    if data_args.annotations:
        available += ranking_metric_names()
    if label_free_selection and data_args.selection_holdout > 0:
        available += signal_names()
    evaluates = training_args.eval_strategy != "no" or training_args.eval_on_start
    if evaluates and not available:
        return [
            "evaluation (eval_strategy, eval_on_start) ranks the catalog: give annotations"
            + (", or selection_holdout > 0 for the label-free signals" if label_free_selection else "")
        ]
    if training_args.load_best_model_at_end or training_args.metric_for_best_model not in (None, "loss"):
        metric = (training_args.metric_for_best_model or "loss").removeprefix("eval_")
        if metric not in available:
            return [
                f"metric_for_best_model {metric!r} is not among the logged metrics; choose one of "
                f"{', '.join(available) or 'none (give annotations)'}"
            ]
    return []


def publishing_problems(training_args: TrainingArguments) -> list[str]:
    """Pushing needs the network and a token; each ``report_to`` integration needs its package."""
    problems = []
    if training_args.push_to_hub:
        if huggingface_hub.constants.is_offline_mode():
            problems.append("push_to_hub needs the network, but HF_HUB_OFFLINE is set")
        elif huggingface_hub.get_token() is None:
            problems.append("push_to_hub needs a Hub token: set HF_TOKEN or run `hf auth login`")
    installed = set(get_available_reporting_integrations())
    for integration in training_args.report_to or []:
        if integration not in ("none", "all") and integration not in installed:
            problems.append(f"report_to {integration} needs its package: pip install {integration}")
    return problems


def input_file_problems(data_args) -> list[str]:
    """The catalog and annotation files: present, plain files, readable."""
    files = {"catalog": data_args.catalog, "annotations": data_args.annotations or None}
    problems = [input_file_problem(path, option) for option, path in files.items() if path]
    return [problem for problem in problems if problem]


def model_path_problems(model_name_or_path: str) -> list[str]:
    """A model named by a local path must be a model folder this library can use
    (``model_folders.model_folder_problem``); a name that is no local path is left to the Hub (or
    its cache) to resolve."""
    path = resolve_model_name(model_name_or_path)
    problem = model_folder_problem(path, what="model_name_or_path")
    return [problem.replace(path, model_name_or_path, 1)] if problem else []


def output_folder_problems(training_args: TrainingArguments) -> list[str]:
    """The output folder must be a folder this process can write, or creatable where it is named,
    and hold nothing the run may not replace (``output_files.output_folder_content_problems``)."""
    output_dir = training_args.output_dir
    if not output_dir:
        return ["output_dir must name a folder"]
    location = Path(output_dir).expanduser().absolute()
    if location.exists() and not location.is_dir():
        return [f"output_dir {output_dir} is a file, not a folder: name another output_dir"]
    problem = unwritable_problem(output_dir, option="output_dir")
    if problem:
        return [problem]
    return output_folder_content_problems(
        output_dir,
        overwrite=training_args.overwrite_output_dir,
        resuming=resumes(training_args.resume_from_checkpoint),
    )


def resume_problems(training_args: TrainingArguments) -> list[str]:
    """A checkpoint to resume from must be a complete checkpoint folder whose weights are readable:
    the one named, or with ``last`` the newest in ``output_dir`` (none yet: the run starts afresh).
    A checkpoint holding safetensors weights is checked as a model folder (its architecture, every
    weights file complete); one whose weights are only in DeepSpeed's own files is left to its
    engine."""
    resume_from_checkpoint = training_args.resume_from_checkpoint
    if resume_from_checkpoint in (None, False):
        return []
    if resume_from_checkpoint in (True, "last"):
        folder = Path(training_args.output_dir)
        checkpoint = get_last_checkpoint(str(folder)) if folder.is_dir() else None
        if checkpoint is None:
            return []
    else:
        checkpoint = resume_from_checkpoint
        if not (Path(checkpoint) / TRAINER_STATE_NAME).is_file():
            return [
                f"resume_from_checkpoint {checkpoint} is not a complete checkpoint folder (no "
                f"{TRAINER_STATE_NAME} in it): name a checkpoint-N folder, or `last` for the newest one in output_dir"
            ]
    if not any(Path(checkpoint).glob("*.safetensors")):
        return []  # the engine's own files (DeepSpeed ZeRO-3): its loader checks them
    problem = model_folder_problem(checkpoint, what="checkpoint", tokenizer=False, local=True)
    return [problem] if problem else []
