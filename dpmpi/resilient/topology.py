"""Graph topologies among the derived communicators (``Create_graph``,
``Create_dist_graph_adjacent``): what their recipe records, checked and normalised the same way
on every rank, and how a repair makes them again. ``derived`` owns the recipes; this module only
turns arguments into recipe entries and back. Neighbours of a distributed graph are recorded as
*logical* ranks (ranks of the active communicator), as ``Create_group`` members are, so that a
replacement gets its predecessor's neighbours and a repair that dropped ranks (policy "shrink")
drops them from every neighbour list (``plan.Recipe.renumbered``). Info arguments (here and for
``Dup``, ``Split_type``) are recorded as their (key, value) pairs and passed again. Pure but for
``make`` and ``with_info``."""
from __future__ import annotations

from typing import Any, Callable, Sequence

from mpi4py import MPI

GRAPH_OPS = ("Create_graph", "Create_dist_graph_adjacent")
EMPTY = "empty"  # MPI.WEIGHTS_EMPTY in a recipe (None: MPI.UNWEIGHTED)


def _ints(name: str, values: Any) -> tuple[int, ...]:
    try:
        out = tuple(int(v) for v in values)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be a sequence of ints, got {values!r}") from None
    return out


def _weights(name: str, weights: Any, count: int) -> tuple[int, ...] | str | None:
    if weights is None or weights is MPI.UNWEIGHTED:
        return None
    if weights is MPI.WEIGHTS_EMPTY:
        return EMPTY
    out = _ints(name, weights)
    if len(out) != count:
        raise ValueError(f"Create_dist_graph_adjacent: {len(out)} {name} for {count} neighbours")
    return out


def _mpi_weights(weights: tuple[int, ...] | str | None) -> Any:
    return MPI.WEIGHTS_EMPTY if weights == EMPTY else (None if weights is None else list(weights))


def info_items(op: str, info: Any) -> tuple[tuple[str, str], ...] | None:
    """An info argument as its (key, value) pairs (None: no info, or an empty one)."""
    if info is None or info == MPI.INFO_NULL:
        return None
    if not isinstance(info, MPI.Info):
        raise TypeError(f"{op} info must be an MPI.Info (or None), got {type(info).__name__}")
    return tuple((k, info.Get(k)) for k in info.keys()) or None


def with_info(items: tuple[tuple[str, str], ...] | None, call: Callable[[MPI.Info], Any]) -> Any:
    """``call(info)`` with an Info made from ``items`` (``MPI.INFO_NULL`` for None), freed after."""
    if items is None:
        return call(MPI.INFO_NULL)
    info = MPI.Info.Create()
    try:
        for k, v in items:
            info.Set(k, v)
        return call(info)
    finally:
        info.Free()


def graph_args(index: Sequence[int], edges: Sequence[int], reorder: bool) -> tuple:
    """``Create_graph``'s recipe entry (the same on every rank)."""
    return (_ints("index", index), _ints("edges", edges), bool(reorder))


def dist_args(sources: Sequence[int], destinations: Sequence[int], sourceweights: Any, destweights: Any,
              info: MPI.Info, reorder: bool, to_logical: Callable[[list[int]], list[int]]) -> tuple:
    """This rank's ``Create_dist_graph_adjacent`` recipe entry: its neighbours as logical ranks
    (``to_logical`` translates ranks of the parent communicator), their weights, ``reorder``, and
    the info's pairs when it has any."""
    hints = info_items("Create_dist_graph_adjacent", info)
    srcs, dsts = _ints("sources", sources), _ints("destinations", destinations)
    sw, dw = _weights("sourceweights", sourceweights, len(srcs)), _weights("destweights", destweights, len(dsts))
    entry = (tuple(to_logical(list(srcs))), sw, tuple(to_logical(list(dsts))), dw, bool(reorder))
    return entry if hints is None else (*entry, hints)


def renumbered_dist(entry: tuple, renumber: dict[int, int]) -> tuple:
    """A distributed graph's recipe entry after a repair that renumbered the logical ranks: the
    neighbours that kept a place, renumbered, with their weights."""
    srcs, sw, dsts, dw, reorder, *hints = entry

    def keep(ranks: tuple[int, ...], weights: Any) -> tuple[tuple[int, ...], Any]:
        kept = [i for i, r in enumerate(ranks) if r in renumber]
        new = tuple(renumber[ranks[i]] for i in kept)
        if isinstance(weights, tuple):
            return new, tuple(weights[i] for i in kept)
        return new, weights

    srcs, sw = keep(srcs, sw)
    dsts, dw = keep(dsts, dw)
    return (srcs, sw, dsts, dw, reorder, *hints)


def make(op: str, entry: tuple, praw: MPI.Intracomm, to_parent: Callable[[list[int]], list[int]]) -> MPI.Comm:
    """Make the graph communicator of ``entry`` on ``praw`` (collective over it). COMM_NULL where
    a graph no longer fits a communicator that a repair shrank, and on ranks outside it."""
    if op == "Create_graph":
        index, edges, reorder = entry
        if len(index) > praw.Get_size():
            return MPI.COMM_NULL
        return praw.Create_graph(list(index), list(edges), reorder)
    srcs, sw, dsts, dw, reorder, *hints = entry
    return with_info(hints[0] if hints else None, lambda info: praw.Create_dist_graph_adjacent(
        to_parent(list(srcs)), to_parent(list(dsts)), _mpi_weights(sw), _mpi_weights(dw), info, reorder))
