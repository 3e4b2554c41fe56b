"""Pure decisions of the snapshot: who holds whose copies, and what a restore does.

No MPI, no memory: these take and return plain data, so they are unit-tested directly
(tests/test_logic.py) and can be replaced. The buddy choice is ONE function, ``buddies``;
everything else (``owners``, the replication, the re-replication after a restore) is derived
from it, so a node-aware placement plugs in by replacing it.
"""
from __future__ import annotations

from typing import Mapping, Sequence, Set

from dpmpi import placement


def buddies(rank: int, size: int, replicas: int, nodes: Sequence[str] | None = None) -> tuple[int, ...]:
    """The logical ranks that hold copies of ``rank``'s snapshot: its ``replicas`` next ring
    neighbours on a communicator of ``size`` ranks (never itself: at most ``size - 1``); with
    ``nodes`` (each rank's node), the node-aware choice of ``dpmpi.placement.holders`` (copies on
    other nodes than the owner; the same ring when all ranks share one node)."""
    if nodes is not None:
        return tuple(placement.holders(nodes, min(replicas, size - 1))[rank])
    return tuple((rank + d) % size for d in range(1, min(replicas, size - 1) + 1))


def owners(rank: int, size: int, replicas: int, nodes: Sequence[str] | None = None) -> tuple[int, ...]:
    """The logical ranks whose copies ``rank`` holds (those that have it among their buddies),
    nearest first going backwards round the ring."""
    if nodes is not None:
        return tuple(placement.held_by(placement.holders(nodes, min(replicas, size - 1)))[rank])
    return tuple(o for o in ((rank - d) % size for d in range(1, size))
                 if rank in buddies(o, size, replicas))


Held = Mapping[int, Mapping[int, Set[int]]]  # rank -> {owner: epochs of owner's copies it holds}


def plan_restore(held: Held, size: int) -> tuple[int, dict[int, int], tuple[int, ...]]:
    """From what every rank holds, the restore: ``(epoch, transfers, lost)``.

    ``held[r][o]`` are the committed epochs of logical rank ``o``'s snapshot that rank ``r``
    holds (its own under ``o == r``; a replacement holds nothing). ``epoch`` is the newest
    epoch whose copy exists for every rank; ``transfers`` maps each rank without its own copy
    of it to the rank that sends it one (the lowest holder). When no epoch is common, ``epoch``
    is -1, ``transfers`` empty and ``lost`` names the ranks whose state is gone (without any
    copy, else those without the newest epoch anyone has); when nothing was ever committed
    anywhere, ``lost`` is empty too."""
    avail: dict[int, set[int]] = {r: set() for r in range(size)}
    for holdings in held.values():
        for owner, epochs in holdings.items():
            if 0 <= owner < size:
                avail[owner] |= set(epochs)
    if not any(avail.values()):
        return -1, {}, ()
    common = set.intersection(*avail.values())
    if not common:
        newest = max(max(v) for v in avail.values() if v)
        lost = tuple(r for r in range(size) if not avail[r]) or tuple(
            r for r in range(size) if max(avail[r]) < newest)
        return -1, {}, lost
    epoch = max(common)
    transfers = {}
    for r in range(size):
        if epoch not in held.get(r, {}).get(r, ()):
            transfers[r] = min(h for h, holdings in held.items() if epoch in holdings.get(r, ()))
    return epoch, transfers, ()


def missing_copies(rank: int, size: int, replicas: int, epoch: int, held: Held,
                   nodes: Sequence[str] | None = None) -> tuple[set[int], set[int]]:
    """After a restore of ``epoch``: the buddies of ``rank`` that lack its copy (send to them)
    and the owners whose copy ``rank`` lacks (receive from them)."""
    def has(r: int, o: int) -> bool:
        return epoch in held.get(r, {}).get(o, ())

    dests = {d for d in buddies(rank, size, replicas, nodes) if not has(d, rank)}
    froms = {o for o in owners(rank, size, replicas, nodes) if not has(rank, o)}
    return dests, froms


def direct_receivers(transfers: Mapping[int, int], size: int, replicas: int, epoch: int, held: Held,
                     can: Mapping[int, bool], nodes: Sequence[str] | None = None) -> set[int]:
    """The ranks of ``transfers`` that receive their copy straight into their arrays (no copy
    back from a slot): those that can (``can[r]``: no device arrays, and their caller modifies the
    arrays only after their own slot was refilled from them: ``restore(swap=True)``) and need not
    send their own copy on afterwards (no buddy of theirs lacks it). Their own slot is refilled
    from their arrays in the background, before their part of the re-replication starts."""
    return {r for r in transfers if can.get(r, False)
            and not missing_copies(r, size, replicas, epoch, held, nodes)[0]}
