"""Multi-process training on the CPU, launched as users launch it: ``accelerate launch`` with the
shipped configs, two processes joined over gloo.

- cross-device mining: two processes train exactly like one process on both their batches;
- the wines recipe under DDP, resumed from a checkpoint, and under DeepSpeed ZeRO-2, ZeRO-3 and FSDP2,
  which must all end on the same weights as the uninterrupted DDP run;
- ZeRO checkpoints consolidate into ordinary checkpoints that ``AutoModel`` loads.

DeepSpeed compiles a communication op on its first start; ``TORCH_EXTENSIONS_DIR`` keeps it
between tests and between runs of the suite.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from conftest import (
    REPO_ROOT,
    WINES_CSV,
    WINES_TEST_ANNOTATIONS,
    accelerate_command,
    flags,
    save_wide_encoder,
)
from transformers import AutoModel, AutoModelForMaskedLM, AutoModelForTokenClassification, AutoTokenizer

from metricbert_trainer.base.modeling import load_masked_lm, masked_lm_location
from metricbert_trainer.data.annotations import load_annotations
from metricbert_trainer.data.catalog import load_catalog
from metricbert_trainer.evaluation.evaluator import RankingEvaluator

pytestmark = pytest.mark.slow

MULTIPROCESS_SCRIPTS = Path(__file__).parent / "multiprocess"
LAUNCH_ENV = {
    **os.environ,
    "HF_HUB_OFFLINE": "1",
    "TOKENIZERS_PARALLELISM": "false",
    "TORCH_EXTENSIONS_DIR": os.environ.get(
        "TORCH_EXTENSIONS_DIR", str(Path.home() / ".cache" / "metricbert-trainer" / "torch_extensions")
    ),
}


def launch(config: str, script: Path | str, *script_args: str) -> subprocess.CompletedProcess:
    """``accelerate launch`` of ``script`` with one of the shipped configs, two CPU processes."""
    command = accelerate_command(config, script, *script_args, processes=2)
    result = subprocess.run(
        command, cwd=REPO_ROOT, env=LAUNCH_ENV, capture_output=True, text=True, timeout=900
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-6000:]
    return result


def short_run(model_path: str, output_dir: Path) -> list[str]:
    """4 steps of 2 processes x 8 items from 48 wines, at a learning rate that moves weights by ~1e-3."""
    return flags(
        model_name_or_path=model_path,
        output_dir=output_dir,
        max_train_items=48,
        max_steps=4,
        per_device_train_batch_size=8,
        learning_rate=1e-3,
        warmup_steps=0,
    )


def train_wines(
    config: str,
    model_path: str,
    output_dir: Path,
    *extra: str,
    launcher: Path | None = None,
    final_ranking: bool = False,
    plot: bool = False,
) -> subprocess.CompletedProcess:
    """The wines recipe for 4 steps of 2 x 8 items, a checkpoint every 2 steps; started through
    ``launcher`` (a script taking the recipe and its arguments) when one is given. The final
    ranking of the 5,810 wines and the projection plot run only when asked (``final_ranking``,
    ``plot``): about 10 s of each launch on 2 Zen 3 cores, and they change no weight."""
    recipe = ("recipes/train_wines.py",) if launcher is None else (launcher, "recipes/train_wines.py")
    skipped = flags(**({} if final_ranking else {"annotations": ""}), **({} if plot else {"plot_column": ""}))
    return launch(
        config,
        *recipe,
        *short_run(model_path, output_dir),
        *skipped,
        *flags(
            logging_steps=1,
            save_strategy="steps",
            save_steps=2,
            save_total_limit=3,
            cpu_bf16="false",  # fp32, so the engines can be compared to float32 rounding
            # The guard's 1/T gradient factor amplifies the engines' reduction-order rounding (ZeRO-3
            # against DDP: 1.1e-5 with it, 1e-6 without); its multi-process exactness is checked
            # in test_cross_device_mining_trains_like_one_process_on_the_whole_batch instead.
            distill_weight=0.0,
            # The recipe's MLM term is off here too: its head warm-up runs on whole weights outside
            # the engine, which ZeRO-3 refuses (mlm_warmup.warm_up_mlm_head).
            mlm_weight=0.0,
            mlm_probability=0.0,
            mlm_head_warmup_steps=0,
            mlm_weight_ramp_steps=0,
            # One padded batch per field: the recipe's length groups also widen the engines' rounding
            # (ZeRO-3 against DDP: 1.2e-5 with 4 groups); the groups' own exactness is checked in
            # tests/base/test_modeling.py and tests/metricbert/test_trainer.py.
            length_groups=1,
        ),
        *extra,
    )


def weights(path: Path) -> dict[str, torch.Tensor]:
    """The whole masked-LM model a run saved (its ``masked_lm/`` folder), trained MLM head included."""
    return AutoModelForMaskedLM.from_pretrained(masked_lm_location(str(path))).state_dict()


# ZeRO-3 and FSDP2 reduce in other orders than DDP. With the whole objective (MLM, head warm-up,
# guard, teacher) their weights ended within 1e-5 of DDP's on an AVX2-only EPYC and up to 1.6e-5
# away on an AVX-512 one (2026-11-28, the same code): float rounding, far below what these tests
# catch (a head left cold misses by 5.7e-3; the weights move by ~1e-3 a step).
WHOLE_OBJECTIVE_ATOL = 5e-5


def assert_same_weights(actual: Path, expected: Path, atol: float = 1e-6) -> None:
    actual_weights, expected_weights = weights(actual), weights(expected)
    assert actual_weights.keys() == expected_weights.keys()
    worst = max(float((actual_weights[k] - expected_weights[k]).abs().max()) for k in expected_weights)
    assert worst <= atol, f"{actual} differs from {expected} by up to {worst}"


def consolidate(checkpoint: Path, destination: Path) -> None:
    """``metricbert consolidate`` of a DeepSpeed checkpoint into an ordinary one in ``destination``."""
    command = [sys.executable, "-m", "metricbert_trainer.cli", "consolidate"]
    command += [str(checkpoint), str(destination), "--allow-pickle"]
    result = subprocess.run(command, env=LAUNCH_ENV, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]


@pytest.fixture(scope="module")
def ddp_run(tmp_path_factory, tiny_model_path) -> Path:
    """The uninterrupted two-process DDP run every other run is compared with."""
    output_dir = tmp_path_factory.mktemp("ddp") / "run"
    train_wines("cpu.yaml", tiny_model_path, output_dir, final_ranking=True, plot=True)
    return output_dir


# The checks of multiprocess/'s scripts that need no recipe: run in one launch (in_one_launch.py),
# each writing into a folder of its own, in this order (the two that trace memory last, since
# tracing slows every allocation after it).
ONE_LAUNCH_CHECKS = (
    "node_shared_cache",
    "conditional_statistics",
    "listed_in_shares",
    "shared_tokenizing",
    "shared_encoding",
    "gathered_batch_equivalence",
    "first_process_ranking",
    "cache_only_encoding",
)
# The synthetic catalog of the two memory checks: both views of 20,000 items in float32 are 39 MiB.
MEMORY_CHECK_ITEMS = 20_000


def tokenizing_texts() -> list[str]:
    """2,001 texts (shares of 1,000 and 1,001), of 1 to 60 words: some longer than 32 tokens."""
    words = "oak cherry tannin plum citrus mineral spice vanilla smoke berry".split()
    return [" ".join(words[(row + word) % 10] for word in range(1 + row * 7 % 60)) for row in range(2001)]


@pytest.fixture(scope="module")
def one_launch(tmp_path_factory, tiny_model_path, wide_encoder_path, minilm_path, tokenizer):
    """``ONE_LAUNCH_CHECKS`` run by one two-process launch: each check's folder by name
    (``folders``), the launch's result with its log (``result``) and the 256-wide encoder the memory
    checks encode with (``memory_encoder``)."""
    root = tmp_path_factory.mktemp("one-launch")
    folders = {name: root / name for name in ONE_LAUNCH_CHECKS}
    for folder in folders.values():
        folder.mkdir()
    (folders["shared_tokenizing"] / "texts.json").write_text(json.dumps(tokenizing_texts()), encoding="utf-8")
    # A bare encoder whose vectors outweigh what a call allocates besides them (the memory checks).
    wide = save_wide_encoder(root / "encoder-256", tokenizer, seed=0, hidden_size=256)
    arguments = {
        "node_shared_cache": [tiny_model_path, str(WINES_CSV), str(folders["node_shared_cache"])],
        "conditional_statistics": [str(folders["conditional_statistics"])],
        "listed_in_shares": [str(folders["listed_in_shares"])],
        "shared_tokenizing": [
            minilm_path,
            str(folders["shared_tokenizing"] / "texts.json"),
            str(folders["shared_tokenizing"]),
        ],
        "shared_encoding": [tiny_model_path, str(WINES_CSV), str(folders["shared_encoding"] / "result.json")],
        "gathered_batch_equivalence": [
            tiny_model_path,
            str(WINES_CSV),
            str(folders["gathered_batch_equivalence"] / "result.json"),
            wide_encoder_path,
        ],
        "first_process_ranking": [wide, str(MEMORY_CHECK_ITEMS), str(folders["first_process_ranking"])],
        "cache_only_encoding": [wide, str(MEMORY_CHECK_ITEMS), str(folders["cache_only_encoding"])],
    }
    plan = root / "plan.json"
    plan.write_text(json.dumps([[f"{name}.py", arguments[name]] for name in ONE_LAUNCH_CHECKS]))
    result = launch("cpu.yaml", MULTIPROCESS_SCRIPTS / "in_one_launch.py", str(plan))
    return SimpleNamespace(folders=folders, result=result, memory_encoder=wide)


def ranks_written(folder: Path) -> list[dict]:
    """What each of the two processes wrote (``rank0.json``, ``rank1.json``)."""
    return [json.loads((folder / f"rank{rank}.json").read_text()) for rank in (0, 1)]


def test_cross_device_mining_trains_like_one_process_on_the_whole_batch(one_launch):
    folders = one_launch.folders
    results = json.loads((folders["gathered_batch_equivalence"] / "result.json").read_text())
    assert results.pop("world_size") == 2
    control = results.pop("local_mining")
    # 8 items' titles and descriptions, encoded half by each process and gathered by both.
    assert results["triplet_distill_guide_cache"]["guide_cached_texts"] == 16
    # The teacher's second encoder: vectors each process looked up for its own rows, gathered.
    assert "triplet_teacher_encoder" in results
    # The teacher's shared neighbours: catalog rows each process found for its own items, gathered.
    assert "triplet_teacher_shared_neighbours" in results
    for name, case in results.items():
        assert case["mean_loss"] == pytest.approx(case["reference_loss"], rel=1e-5), name
        assert case["max_gradient_difference"] <= 1e-4 * case["gradient_scale"], name
    # Mining each process's own batch is a different objective, and the check sees it.
    assert control["max_gradient_difference"] > 1e-2 * control["gradient_scale"]


def test_processes_share_the_encoding_and_all_get_every_vector(one_launch):
    folders = one_launch.folders
    result = json.loads((folders["shared_encoding"] / "result.json").read_text())
    assert result["processes"] == 2 and result["texts"] % 2 == 1
    assert result["max_difference"] < 1e-5
    # The float16 shares land in their rows too: each value within one float16 step of the single
    # process's (a row in the wrong place would be many steps off).
    assert result["float16"] == "float16" and result["float16_max_steps"] <= 1


def test_a_machines_processes_hold_one_copy_of_the_guides_cache(one_launch):
    """Each process held the whole guide's cache; now the processes of a machine map one file of
    /dev/shm, removed once they all have it (nothing left behind), filled with the vectors one
    process encodes alone. Without the shared memory's folder each keeps its own, and writes it."""
    folders = one_launch.folders
    ranks = ranks_written(folders["node_shared_cache"])
    assert all(rank["processes"] == 2 and rank["sharers"] == 2 for rank in ranks)
    maps = [rank["maps"] for rank in ranks]
    assert len(maps[0]) == 1 and maps[0] == maps[1] and maps[0][0].endswith(" (deleted)")
    assert not Path(maps[0][0].removesuffix(" (deleted)")).exists()
    assert all(rank["max_difference"] < 1e-5 for rank in ranks)
    assert all(rank["fallback_sharers"] == 1 and rank["fallback_writer"] for rank in ranks)


def test_statistics_only_some_processes_recorded_are_averaged_by_name(one_launch):
    folders = one_launch.folders
    expected = [
        {
            "triplet_loss": 2.0,
            "guide_negative_closer_rate": 0.5,
            "matched_score": 0.9,
            "embedding_spread": 0.25,
        },
        {"triplet_loss": 2.0},
        {},
    ]
    assert ranks_written(folders["conditional_statistics"]) == [expected, expected]


def test_each_process_lists_its_share_and_every_process_gets_the_whole_catalogs_lists(one_launch):
    """The batches' neighbour lists and the teacher's are listed a share per process and gathered:
    each process lists a disjoint half of the rows, and both end with the lists one process lists
    alone (exact search) or, where each process's own lists differ, with one and the same lists."""
    from metricbert_trainer.metricbert.neighbourhood_batches import nearest_neighbours

    folders = one_launch.folders
    ranks = ranks_written(folders["listed_in_shares"])
    shares = [rank["listed"] for rank in ranks]
    items = len(ranks[0]["vectors"])
    assert all(len(share) == 1 for share in shares)  # each process listed once
    assert sorted(shares[0][0] + shares[1][0]) == list(range(items))
    assert {len(shares[0][0]), len(shares[1][0])} == {items // 2, items // 2 + 1}
    alone = nearest_neighbours(torch.tensor(ranks[0]["vectors"], dtype=torch.float32), candidates=12)
    for rank in ranks:
        assert rank["exact"] == alone.tolist() and rank["dtype"] == "torch.int64"
        assert rank["searched"] == ranks[0]["searched"] and len(rank["searched"]) == items
        assert rank["own"] == ranks[0]["own"]
    # Each process's rows came from that process: the second share carries its offset.
    assert ranks[0]["own"][0][0] == 0 and ranks[0]["own"][-1][0] == 1000 + items - 1


def test_processes_tokenize_a_share_of_the_catalog_each_and_all_receive_the_whole(one_launch, tokenizer):
    """Every process of a launched training tokenized every catalog text, and every process of a
    shared encoding counted every text's tokens to order them: about 19 minutes each, however many
    processes, for the 20 million texts of ten million wine items. Each now takes a share, and all
    receive what one process alone gets, the ids gathered whole or in pieces that end inside a row."""
    import numpy as np

    from metricbert_trainer.data.token_rows import TokenRows
    from metricbert_trainer.evaluation.encoding import longest_first

    folders = one_launch.folders
    texts = tokenizing_texts()
    alone = TokenRows.tokenize(tokenizer, texts, 32)
    assert (alone.lengths == 32).sum() > 100 and alone.lengths.min() < 10
    for rank in (0, 1):
        with np.load(folders["shared_tokenizing"] / f"rank{rank}.npz") as received:
            for ids, offsets in (("ids", "offsets"), ("pieces_ids", "pieces_offsets")):
                assert received[ids].dtype == alone.ids.dtype
                np.testing.assert_array_equal(received[ids], alone.ids)
                np.testing.assert_array_equal(received[offsets], alone.offsets)
            np.testing.assert_array_equal(received["order"], longest_first(tokenizer, texts, 32))
            # Its own share, twice (whole, then in pieces); its share's counts once.
            assert received["rows_tokenized"] in (1000, 1001)
            assert received["order_tokenized"] in (1000, 1001)


def test_encode_shares_the_catalog_among_processes_and_writes_one_cache(files, tiny_model_path, tmp_path):
    """``accelerate launch -m metricbert_trainer.cli encode`` on two processes writes the cache once,
    with the vectors one process encodes alone."""
    import numpy as np

    from metricbert_trainer.cli import main as metricbert

    options = [
        "encode",
        "--model",
        tiny_model_path,
        "--catalog",
        str(files / "wines.csv"),
        "--max-length",
        "32",
    ]
    assert metricbert([*options, "--cache", str(tmp_path / "alone.npz")]) == 0
    shared = tmp_path / "shared.npz"
    result = launch("cpu.yaml", "--module", "metricbert_trainer.cli", *options, "--cache", str(shared))
    assert (
        result.stdout.count(f"{shared}: 120 vectors of 60 items") == 1 and "on 2 process(es)" in result.stdout
    )
    assert result.stderr.count("Wrote embeddings to") == 1
    with np.load(tmp_path / "alone.npz") as alone, np.load(shared) as both:
        assert sorted(alone.files) == sorted(both.files) and str(alone["fingerprint"]) == str(
            both["fingerprint"]
        )
        for name in alone.files:
            if name.startswith("view:"):
                np.testing.assert_allclose(both[name], alone[name], atol=1e-5)
            else:  # the fingerprints, the texts' digests and the precision
                np.testing.assert_array_equal(both[name], alone[name])


def test_recommend_all_shares_the_items_among_a_launchs_processes_and_writes_one_table(
    files, tiny_model_path, tmp_path
):
    """``accelerate launch -m metricbert_trainer.cli recommend --all`` on two processes: the
    encoding shared, the TF-IDF fitted and the lists listed once (by process 0), each process
    ranking half the items, and the parts joined into the table one process writes from the same
    vectors, byte for byte, no part left behind."""
    import shutil

    from metricbert_trainer.cli import main as metricbert

    options = [
        "recommend", "--model", tiny_model_path, "--catalog", str(files / "wines.csv"),
        "--max-length", "32", "--all", "--top-k", "5",
    ]  # fmt: skip
    launched, shared = tmp_path / "launched" / "table.csv", tmp_path / "launched" / "items.npz"
    launched.parent.mkdir()
    result = launch(
        "cpu.yaml",
        "--module",
        "metricbert_trainer.cli",
        *options,
        "--output",
        str(launched),
        "--cache",
        str(shared),
    )
    assert result.stdout.count(f"{launched}: 300 neighbours of 60 items") == 1
    assert result.stdout.count("on 2 processes.") == 1
    for once in (
        "Wrote embeddings to",
        "listing the 20 nearest items",
        "Wrote 150 recommendations (30 items)",
    ):
        assert result.stderr.count(once) == (2 if once.startswith("Wrote 150") else 1), once
    assert sorted(path.name for path in launched.parent.iterdir()) == [
        "items.npz", "items.shared-neighbours.npz", "items.tfidf.npz", "table.csv"
    ]  # fmt: skip
    alone = tmp_path / "alone.npz"
    shutil.copy(shared, alone)  # the same vectors; the TF-IDF and the lists made again by one process
    assert metricbert([*options, "--output", str(tmp_path / "alone.csv"), "--cache", str(alone)]) == 0
    assert launched.read_bytes() == (tmp_path / "alone.csv").read_bytes()


def test_a_launch_that_only_writes_the_cache_leaves_the_vectors_with_process_0(one_launch, tokenizer):
    """Every process of ``metricbert encode`` received every vector, and read a matching or an
    earlier cache whole: 31 GB each for ten million MiniLM items. Now process 0 alone holds them,
    and no process reads a cache that matches; the cache is the one a single process writes, after
    a change of catalog too, and a damaged earlier cache that process 0 alone reads is encoded again
    by all of them (no process left waiting). Process 0 alone reads the cache, and each process
    counts the tokens of a share of the texts to order them: every process counted every text,
    about 20 minutes each for ten million items."""
    import numpy as np
    from transformers import AutoModel

    from metricbert_trainer.evaluation.embedding_cache import digest_matrix, text_digests
    from metricbert_trainer.evaluation.encoding import encode_texts

    folder, items = one_launch.folders["cache_only_encoding"], MEMORY_CHECK_ITEMS
    ranks = ranks_written(folder)
    assert all(rank["processes"] == 2 for rank in ranks)
    vectors_bytes = 2 * items * 256 * 4  # both views in float32: 39 MiB
    first, second = (rank["calls"] for rank in ranks)
    assert all(call["returned_none"] for rank in (first, second) for call in rank.values())
    for call in ("fresh", "updated"):  # process 0 holds the vectors; process 1, its share's half
        assert first[call]["peak"] > vectors_bytes and second[call]["peak"] < vectors_bytes / 2, call
    assert first["matching"]["peak"] < vectors_bytes / 2 and second["matching"]["peak"] < vectors_bytes / 2
    # Process 0 alone reads a cache that matches through (its CRCs); the other reads what says it
    # is a cache (its names), neither its vectors nor, in an update, the earlier texts' digests.
    assert first["matching"]["bytes_read"] > vectors_bytes
    assert all(call["bytes_read"] < vectors_bytes / 100 for call in second.values())
    # Each counts the tokens of a share of the texts, and tokenizes a share's batches: the texts
    # once, where counting every text made it one and a half times.
    texts = 2 * items
    assert all(rank["fresh"]["texts_tokenized"] <= 1.1 * texts for rank in (first, second))
    assert second["matching"]["texts_tokenized"] == 0
    assert one_launch.result.stderr.count("39800 of 40000 texts read back, 200 distinct texts encoded") == 1
    assert one_launch.result.stderr.count("Cannot read the embedding cache") == 1  # process 0 alone read it
    model = AutoModel.from_pretrained(one_launch.memory_encoder)
    sample = np.random.default_rng(0).choice(items, 200, replace=False)
    for call in ("fresh", "updated", "damaged"):
        views = json.loads((folder / f"{call}.json").read_text())
        with np.load(folder / f"{call}.npz") as cache:
            for name, texts in views.items():
                rows = sample if len(texts) == items else np.arange(len(texts))
                alone = encode_texts(model, tokenizer, [texts[row] for row in rows], max_length=16)
                np.testing.assert_allclose(cache[f"view:{name}"][rows], alone, atol=1e-5)
                np.testing.assert_array_equal(cache[f"digest:{name}"], digest_matrix(text_digests(texts)))
    assert (folder / "matching.npz").read_bytes() == (folder / "fresh.npz").read_bytes()


def test_the_training_evaluation_ranks_on_process_0_alone_and_every_process_gets_its_metrics(one_launch):
    """Every process of a training evaluation received the catalog's vectors and ranked it from
    every seed: at a million items 3 GB of MiniLM vectors, as much again scaled and 2 GB of rows
    for 500 seeds, in each process. Now process 0 alone does, and the others take its metrics."""
    folders = one_launch.folders
    first, second = ranks_written(folders["first_process_ranking"])
    assert first["processes"] == 2 and first["metrics"] == second["metrics"]
    assert {"mpr", "mrr", "hr@10", "map"} <= first["metrics"].keys()
    vectors_bytes = 2 * MEMORY_CHECK_ITEMS * 256 * 4
    assert first["peak"] > vectors_bytes and second["peak"] < vectors_bytes / 2


def test_two_process_run_trains_evaluates_and_logs_across_processes(ddp_run, tiny_model_path):
    state = json.loads((ddp_run / "checkpoint-4" / "trainer_state.json").read_text())
    # 48 items in batches of 2 x 8: an epoch is 3 steps only if both processes took part.
    step_three = next(entry for entry in state["log_history"] if entry.get("step") == 3 and "loss" in entry)
    assert step_three["epoch"] == pytest.approx(1.0)
    assert {"triplet_loss", "negative_closer_rate", "guide_negative_closer_rate"} <= step_three.keys()
    # The processes shared the catalog's encoding; the metrics are those of one process alone.
    results = json.loads((ddp_run / "eval_results.json").read_text())
    trained_length = json.loads((ddp_run / "training_args.json").read_text())["max_length"]
    evaluator = RankingEvaluator(
        load_catalog(WINES_CSV),
        load_annotations(WINES_TEST_ANNOTATIONS, load_catalog(WINES_CSV)),  # the recipe's default
        batch_size=128,
        max_length=trained_length,
    )
    alone = evaluator(load_masked_lm(str(ddp_run)), AutoTokenizer.from_pretrained(tiny_model_path))
    for name in ("mpr", "mrr", "hr@10", "hr@100"):
        assert results[f"eval_{name}"] == pytest.approx(alone[name], abs=1e-3), name
    AutoModel.from_pretrained(ddp_run)


def resume_from_step_two(
    run: Path,
    resumed: Path,
    model_path: str,
    *extra: str,
    config: str = "cpu.yaml",
    launcher: Path | None = None,
) -> None:
    """A run of the wines recipe (DDP unless ``config`` says otherwise) in ``resumed``, from a
    copy of ``run``'s step-2 checkpoint."""
    resumed.mkdir()
    shutil.copytree(run / "checkpoint-2", resumed / "checkpoint-2")
    resume = ("--resume_from_checkpoint", str(resumed / "checkpoint-2"))
    train_wines(config, model_path, resumed, *extra, *resume, launcher=launcher)


def test_two_process_run_resumes_from_its_checkpoint(tmp_path, tiny_model_path, ddp_run):
    resumed = tmp_path / "resumed"
    # Recomputes activations, so DDP cannot search for unused parameters; the frozen MLM head
    # must leave none, or the second step fails.
    resume_from_step_two(ddp_run, resumed, tiny_model_path, "--activation_checkpointing", "true")
    # Optimizer, scheduler, data order and each process's random state were restored: the
    # resumed run ends where the uninterrupted one did.
    assert_same_weights(resumed, ddp_run)
    state = json.loads((resumed / "checkpoint-4" / "trainer_state.json").read_text())
    assert state["global_step"] == 4


# The MiniLM recipes' objective: MLM masks, the head's warm-up, the weight ramp, length groups, the
# guard, and the teacher's shared neighbours (the recipe's 50 are more than 48 items have).
WHOLE_OBJECTIVE = flags(
    mlm_weight=1.0,
    mlm_probability=0.15,
    mlm_head_warmup_steps=2,
    mlm_weight_ramp_steps=2,
    length_groups=4,
    distill_weight=1.0,
    teacher_shared_neighbours=5,
)


@pytest.fixture(scope="module")
def ddp_whole_objective_run(tmp_path_factory, tiny_model_path) -> Path:
    """An uninterrupted two-process DDP run of ``WHOLE_OBJECTIVE``."""
    output_dir = tmp_path_factory.mktemp("ddp-whole-objective") / "run"
    train_wines("cpu.yaml", tiny_model_path, output_dir, *WHOLE_OBJECTIVE)
    return output_dir


def test_the_recipes_whole_objective_resumes_exactly_under_ddp(
    tmp_path, tiny_model_path, ddp_whole_objective_run
):
    """A run resumed from its step-2 checkpoint skips the warm-up and still ends on the
    uninterrupted run's weights, since the masks come from generators seeded by the batch's texts
    and the warmed-up head is in the checkpoint."""
    resumed = tmp_path / "resumed"
    resume_from_step_two(ddp_whole_objective_run, resumed, tiny_model_path, *WHOLE_OBJECTIVE)
    assert_same_weights(resumed, ddp_whole_objective_run)
    logged = json.loads((ddp_whole_objective_run / "checkpoint-4" / "trainer_state.json").read_text())
    assert any(entry.get("mlm_loss", 0.0) > 0 for entry in logged["log_history"])


def test_zero3_warms_the_partitioned_head_up_as_ddp_does_and_consolidates(
    tmp_path, tiny_model_path, ddp_whole_objective_run
):
    """Under ZeRO-3 the head is warmed up in a whole copy and written back into the partitions;
    the run then ends where DDP's does. The warm-up moves the head by about its learning rate
    (1e-3 a step), so a head left cold misses the tolerance by far (5.7e-3 against 8.4e-7 when written back).
    Its partitioned checkpoint consolidates into an ordinary, complete model folder."""
    output_dir = tmp_path / "zero3"
    # The final ranking of a partitioned model, on process 0 alone: a path of ZeRO-3's own.
    result = train_wines("zero3.yaml", tiny_model_path, output_dir, *WHOLE_OBJECTIVE, final_ranking=True)
    assert "MLM-head warm-up, 2 steps" in result.stderr
    assert 0 < json.loads((output_dir / "eval_results.json").read_text())["eval_mpr"] <= 100
    # Both lists were listed a share per process (the rest of the lists' test is the one above).
    for listed in ("Shared neighbours: the teacher's 5 nearest items of each of 48", "Neighbourhood batches"):
        line = next(line for line in result.stderr.splitlines() if listed in line)
        assert line.endswith("(2 processes, a share each).")
    shards = sorted(path.name for path in (output_dir / "checkpoint-4" / "global_step4").iterdir())
    assert "zero_pp_rank_1_mp_rank_00_model_states.pt" in shards  # parameters were partitioned
    consolidated = tmp_path / "consolidated"
    consolidate(output_dir / "checkpoint-4", consolidated)
    assert (consolidated / "model.safetensors").is_file() and (consolidated / "tokenizer.json").is_file()
    assert (consolidated / "modules.json").is_file() and (consolidated / "README.md").is_file()
    AutoModel.from_pretrained(consolidated)
    assert_same_weights(consolidated, ddp_whole_objective_run, atol=WHOLE_OBJECTIVE_ATOL)


def test_fsdp2_shards_the_whole_objective_trains_like_ddp_and_resumes_exactly(
    tmp_path, tiny_model_path, ddp_whole_objective_run
):
    """``fsdp.yaml`` with FSDP2 really sharding (``multiprocess/fsdp2_on_cpu.py``): the tied
    embeddings and MLM head in one group (accelerate's own plan fails on them with torch 2.13), the
    MLM warm-up before sharding, the lookups through the sharded layers. It ends where DDP does,
    and a run resumed from its step-2 checkpoint, with activation checkpointing, ends where it does."""
    fsdp = MULTIPROCESS_SCRIPTS / "fsdp2_on_cpu.py"
    output_dir = tmp_path / "fsdp2"
    result = train_wines("fsdp.yaml", tiny_model_path, output_dir, *WHOLE_OBJECTIVE, launcher=fsdp)
    assert (
        "FSDP2: 2 layers sharded in groups of their own, BertEmbeddings and BertOnlyMLMHead" in result.stderr
    )
    assert (output_dir / "checkpoint-4" / "pytorch_model_fsdp.bin").is_file()
    assert_same_weights(output_dir, ddp_whole_objective_run, atol=WHOLE_OBJECTIVE_ATOL)
    AutoModel.from_pretrained(output_dir)

    resumed = tmp_path / "fsdp2-resumed"
    # The recipe's activation checkpointing (bert_large.yaml has it on) recomputes inside the shards.
    checkpointing = ("--activation_checkpointing", "true")
    resume_from_step_two(
        output_dir,
        resumed,
        tiny_model_path,
        *WHOLE_OBJECTIVE,
        *checkpointing,
        config="fsdp.yaml",
        launcher=fsdp,
    )
    assert_same_weights(resumed, output_dir)


def test_fsdp2_trains_a_model_without_tied_parameters_like_ddp(tmp_path, tiny_model_path):
    """The multi-task NER recipe's token classifier ties nothing; accelerate's own plan failed on
    it too (it shards the word embeddings again inside the already sharded embeddings layer)."""

    def train_ner(config: str, output_dir: Path, *launcher: Path) -> None:
        options = short_run(tiny_model_path, output_dir) + flags(
            max_length=64,
            cpu_bf16="false",
            eval_strategy="no",
            save_strategy="no",
            load_best_model_at_end="false",
        )
        launch(config, *launcher, "recipes/ner/train.py", *options)

    train_ner("fsdp.yaml", tmp_path / "fsdp2", MULTIPROCESS_SCRIPTS / "fsdp2_on_cpu.py")
    train_ner("cpu.yaml", tmp_path / "ddp")
    sharded = AutoModelForTokenClassification.from_pretrained(tmp_path / "fsdp2").state_dict()
    replicated = AutoModelForTokenClassification.from_pretrained(tmp_path / "ddp").state_dict()
    assert sharded.keys() == replicated.keys()
    assert max(float((sharded[k] - replicated[k]).abs().max()) for k in replicated) <= 1e-5


def test_deepspeed_zero2_trains_like_ddp_and_resumes_only_when_pickles_are_allowed(
    tmp_path, tiny_model_path, ddp_run
):
    output_dir = tmp_path / "zero2"
    train_wines("zero2.yaml", tiny_model_path, output_dir)
    assert (output_dir / "checkpoint-4" / "global_step4").is_dir()  # DeepSpeed wrote the checkpoint
    # Other reduction orders than DDP's: equal to float32 rounding (the weights move by ~1e-3).
    assert_same_weights(output_dir, ddp_run, atol=1e-5)
    AutoModel.from_pretrained(output_dir)

    # DeepSpeed's optimizer files are pickles: resuming one needs the explicit option.
    resumed = tmp_path / "zero2-resumed"
    resume = ("--resume_from_checkpoint", str(output_dir / "checkpoint-2"))
    with pytest.raises(AssertionError, match="allow_pickled_checkpoints"):
        train_wines("zero2.yaml", tiny_model_path, resumed, *resume)
    train_wines("zero2.yaml", tiny_model_path, resumed, *resume, "--allow_pickled_checkpoints", "true")
    assert_same_weights(resumed, ddp_run, atol=1e-5)


def test_zero3_partitioned_model_gets_a_whole_guide(tmp_path, tiny_model_path):
    output = tmp_path / "guide.json"
    launch("zero3.yaml", MULTIPROCESS_SCRIPTS / "zero3_guide_copy.py", tiny_model_path, str(output))
    result = json.loads(output.read_text())
    assert result["partitioned"]
    assert result["compared_tensors"] > 0 and result["max_difference"] == 0.0
