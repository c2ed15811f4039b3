"""Backing a large array that is read at random with huge pages, where Linux allows it.

NumPy asks Linux to back its large arrays with transparent huge pages (2 MiB instead of 4 KiB),
so a gather of rows from all over such an array misses the TLB far less. Memory a C++ library
allocates, such as the flat storage of a FAISS index, gets 4 KiB pages: re-scoring candidates
from an index's storage (``candidate_lists.indexed_views``) gathered rows about 15% slower than
from a NumPy copy of the same rows (2 Zen 5 cores, 100,000 x 768 floats), which collapsing the
storage into huge pages recovered. The collapse (``MADV_COLLAPSE``) is Linux 6.1 or later and
copies the memory once, about 2.5 s per GiB on those cores; elsewhere nothing changes but speed.
"""

from __future__ import annotations

import ctypes
import sys

import numpy as np

# linux/mman.h: collapse the range into huge pages now (Linux 6.1+).
MADV_COLLAPSE = 25
HUGE_PAGE_BYTES = 2 * 2**20


def collapse_into_huge_pages(array: np.ndarray) -> bool:
    """Asks Linux to back every whole 2 MiB page of ``array``'s memory (C-contiguous) with a huge
    page now; whether it did. False on another system, a kernel before 6.1, with transparent huge
    pages off, or for an array smaller than a huge page: the array is as it was, only slower to
    gather from at random."""
    if not array.flags.c_contiguous:
        raise ValueError("Only a C-contiguous array's memory is one range to collapse.")
    if not sys.platform.startswith("linux"):
        return False
    address = array.__array_interface__["data"][0]
    start = -(-address // HUGE_PAGE_BYTES) * HUGE_PAGE_BYTES
    stop = (address + array.nbytes) // HUGE_PAGE_BYTES * HUGE_PAGE_BYTES
    if stop <= start:
        return False
    madvise = ctypes.CDLL(None, use_errno=True).madvise
    madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    return madvise(start, stop - start, MADV_COLLAPSE) == 0
