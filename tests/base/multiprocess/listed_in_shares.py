"""Run under ``accelerate launch`` with two processes: the catalog's lists computed in shares
(``listed_in_shares``), through the functions training lists with; each process writes the rows it
listed and the lists it received.

Usage: accelerate launch --config_file accelerate_configs/cpu.yaml THIS_FILE OUTPUT_DIR
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
from accelerate import PartialState

from metricbert_trainer.base.distributed import listed_in_shares, process_group_closed_at_exit
from metricbert_trainer.metricbert.neighbourhood_batches import nearest_neighbours
from metricbert_trainer.metricbert.shared_neighbours import teacher_candidate_lists

# An odd count, so the two shares differ in size.
ITEMS = 301


def catalog_vectors() -> list[torch.Tensor]:
    """Two fields of unit vectors, the same on every process (written out for the test to list alone)."""
    generator = torch.Generator().manual_seed(0)
    return [
        torch.nn.functional.normalize(torch.randn(ITEMS, 16, generator=generator), dim=1) for _ in range(2)
    ]


def main(output_dir: str) -> None:
    from scipy import sparse

    state = PartialState(cpu=True)
    fields = catalog_vectors()
    listed = []

    def batch_lists(rows: torch.Tensor) -> torch.Tensor:
        listed.append(rows.tolist())
        return nearest_neighbours(fields[0], candidates=12, rows=rows)

    exact = listed_in_shares(batch_lists, ITEMS, state.device)
    tfidf = [sparse.csr_matrix(vectors.abs().numpy()) for vectors in fields]
    searched = listed_in_shares(
        lambda rows: teacher_candidate_lists(
            fields, tfidf, tfidf_weight=0.2, neighbours=5, candidates=20, rows=rows
        ),
        ITEMS,
        state.device,
    )
    # Lists that differ by process, as two FAISS indexes filled by threads in any order may.
    own = listed_in_shares(
        lambda rows: (rows + 1000 * state.process_index)[:, None].repeat(1, 3), ITEMS, state.device
    )
    path = Path(output_dir) / f"rank{state.process_index}.json"
    results = {"listed": listed, "exact": exact.tolist(), "searched": searched.tolist(), "own": own.tolist()}
    path.write_text(json.dumps({**results, "dtype": str(exact.dtype), "vectors": fields[0].tolist()}))


if __name__ == "__main__":
    with process_group_closed_at_exit():
        main(*sys.argv[1:])
