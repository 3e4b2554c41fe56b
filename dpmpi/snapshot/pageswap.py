"""Restoring by page exchange: which bytes of a registered array can take the snapshot slot's
pages (``dpmpi_pages_swap``, no copy) instead of a copy, decided from the addresses alone.

Pure functions (unit-tested in tests/test_logic.py), except ``anonymous_ranges``, which reads
``/proc/self/maps`` once per Snapshot. Only private anonymous memory may be exchanged: the pages
of a shared or file mapping (``np.memmap``, shared memory) would leave their file or their sharers.
"""
from __future__ import annotations

import os
from typing import Iterable, Sequence

PAGE = os.sysconf("SC_PAGE_SIZE")


def parse_maps(text: str) -> list[tuple[int, int]]:
    """The private anonymous mappings of a ``/proc/PID/maps`` text, (start, end), adjacent ones merged."""
    ranges: list[tuple[int, int]] = []
    for line in text.splitlines():
        fields = line.split(None, 5)
        if len(fields) < 5:
            continue
        span, perms, _off, _dev, inode = fields[:5]
        path = fields[5].strip() if len(fields) > 5 else ""
        if not perms.startswith("rw") or perms[3:4] != "p" or inode != "0" or path not in ("", "[heap]"):
            continue
        lo, hi = (int(x, 16) for x in span.split("-"))
        if ranges and ranges[-1][1] == lo:
            ranges[-1] = (ranges[-1][0], hi)
        else:
            ranges.append((lo, hi))
    return ranges


def anonymous_ranges() -> list[tuple[int, int]]:
    """This process's private anonymous mappings (empty where /proc cannot be read)."""
    try:
        with open("/proc/self/maps") as f:
            return parse_maps(f.read())
    except OSError:
        return []


def covered(ranges: Sequence[tuple[int, int]], start: int, end: int) -> bool:
    """Whether [start, end) lies inside one of ``ranges`` (merged, sorted)."""
    return any(lo <= start and end <= hi for lo, hi in ranges)


def split(array: int, slot: int, nbytes: int, page: int = PAGE) -> tuple[int, int] | None:
    """How an array at address ``array`` takes the pages of its copy at ``slot``: ``(head,
    body)``, the bytes copied before the whole pages and the bytes of whole pages exchanged (the
    rest, ``nbytes - head - body``, is copied too); None when no whole page can be exchanged (the
    two addresses are not at the same offset in a page, or the array spans no whole page)."""
    if (array - slot) % page:
        return None
    head = -array % page
    body = (nbytes - head) // page * page if nbytes > head else 0
    return (head, body) if body > 0 else None


def shift_for(addresses: Iterable[tuple[int, int]], page: int = PAGE) -> int:
    """The offset in a page at which to start a slot whose page-aligned entries line up with the
    arrays at ``addresses`` ((address, bytes) each): the offset of most of the bytes."""
    weight: dict[int, int] = {}
    for address, nbytes in addresses:
        weight[address % page] = weight.get(address % page, 0) + nbytes
    return max(weight, key=lambda k: (weight[k], -k)) if weight else 0
