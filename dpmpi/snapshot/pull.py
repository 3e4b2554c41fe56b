"""Restore transfers between two processes of one node by reading: the rank that lacks its copy
reads it from the holder's replica slot with ``process_vm_readv`` on its copy threads (and the
thread that waits), checksumming each unit as it arrives, instead of the holder sending it as
MPI messages that one thread of the receiver copies and the holder then reads again to check.

What a restore's agreement carries for it (``offer``), and who reads from whom (``plan``, a pure
function, unit-tested in tests/test_logic.py). A read that fails (the other process is not
readable: another user, a pid namespace that differs, ptrace restrictions, or it died) is not
an error: ``restore`` sends that copy as messages in a second round.

Which processes may read each other is decided from what each rank says of itself: the same MPI
processor name, pid namespace and user. Open MPI's own single-copy transport (CMA) reads the
same way and needs the same permission (``ptrace`` access: Yama's ``ptrace_scope`` 2 or 3, or a
seccomp filter, forbid it; then every such read falls back to messages).
"""
from __future__ import annotations

import functools
import os
from typing import Mapping, Sequence

from dpmpi import config

Offer = tuple  # (identity or None, {owner: {epoch: address of the replica slot}})


@functools.cache
def identity() -> tuple[tuple, int] | None:
    """(who may read this process besides the node it is on: its pid namespace and user; its
    pid); None where restores must not read (DPMPI_RESTORE_PULL=0)."""
    if not config.get("DPMPI_RESTORE_PULL"):
        return None
    try:
        ns = os.stat("/proc/self/ns/pid")
    except OSError:
        return None  # (no /proc: not Linux as we know it)
    return ((ns.st_dev, ns.st_ino), os.getuid()), os.getpid()


def offer(addresses: dict[int, dict[int, int]]) -> Offer:
    """What this rank adds to a restore's agreement: its identity and the addresses of the
    replica slots it holds, {owner: {epoch: address}} (``Replication.addresses``)."""
    return identity(), addresses


def plan(transfers: Mapping[int, int], offers: Sequence[Offer], epoch: int,
         nodes: Sequence[str]) -> dict[int, tuple[int, int]]:
    """The transfers of ``transfers`` (receiver -> holder) done by reading: receiver -> (the
    holder's pid, the address of its copy of ``epoch``). Both must be on the same node
    (``nodes``: each rank's, gathered with the snapshot communicator) and have an identity, the
    same one, and the holder must hold that copy."""
    out: dict[int, tuple[int, int]] = {}
    for r, h in transfers.items():
        mine, theirs = offers[r][0], offers[h][0]
        address = offers[h][1].get(r, {}).get(epoch)
        if (nodes[r] == nodes[h] and mine is not None and theirs is not None and mine[0] == theirs[0]
                and address is not None):
            out[r] = (theirs[1], address)
    return out
