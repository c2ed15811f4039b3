from __future__ import annotations

import numpy as np
import pytest

from metricbert_trainer.base.huge_pages import HUGE_PAGE_BYTES, collapse_into_huge_pages


def huge_page_kib(address: int) -> int:
    """AnonHugePages of the mapping of this process that holds ``address`` (/proc/self/smaps)."""
    inside = False
    with open("/proc/self/smaps", encoding="ascii") as smaps:
        for line in smaps:
            head = line.split()[0]
            if "-" in head and not head.endswith(":"):
                start, stop = (int(edge, 16) for edge in head.split("-"))
                inside = start <= address < stop
            elif inside and head == "AnonHugePages:":
                return int(line.split()[1])
    raise LookupError(f"No mapping holds {address:#x}.")


def test_an_index_storage_is_read_from_huge_pages_with_its_rows_kept():
    """A FAISS flat storage is C++ memory in 4 KiB pages; the rows ``index_storage_rows`` hands out
    are in huge pages, the same bits. Arrays that cannot be collapsed are told apart."""
    faiss = pytest.importorskip("faiss")
    from metricbert_trainer.evaluation.neighbours import index_storage_rows

    if not collapse_into_huge_pages(np.ones(4 * HUGE_PAGE_BYTES, dtype=np.uint8)):
        pytest.skip("This kernel does not collapse memory into huge pages (Linux 6.1+ with THP).")
    # 35 MiB: above glibc's largest mmap threshold (32 MiB), so the storage is a mapping of its own
    # whatever the heap holds, as a catalog's storage is.
    rows = np.random.default_rng(0).standard_normal((12000, 768), dtype=np.float32)
    index = faiss.IndexFlatIP(768)
    index.add(rows)
    stored = index_storage_rows(index, index)
    assert huge_page_kib(stored.__array_interface__["data"][0]) >= 16 * HUGE_PAGE_BYTES // 1024
    assert np.array_equal(stored, rows)
    assert not collapse_into_huge_pages(np.ones(1000, dtype=np.float32))  # under one huge page
    with pytest.raises(ValueError, match="C-contiguous"):
        collapse_into_huge_pages(stored[:, :384])
