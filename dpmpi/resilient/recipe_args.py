"""What a rank's call that makes a derived communicator is recorded as (its part of a
``plan.Recipe``): checked, so that a bad argument raises on every rank alike before any
collective, and with ranks given as logical ranks (ranks of the active communicator) where the
call names ranks. Pure but for MPI group look-ups; used by dpmpi.resilient.derived."""
from __future__ import annotations

from typing import Any

from mpi4py import MPI

from dpmpi.resilient import intercomms, topology
from dpmpi.resilient.plan import PER_RANK


def own_args(op: str, args: tuple, praw: MPI.Comm, active: MPI.Intracomm) -> Any:
    """``praw.<op>(*args)``'s record (``praw``: the parent communicator)."""
    if op == "Create_graph":
        return topology.graph_args(*args)
    if op == "Create_dist_graph_adjacent":
        return topology.dist_args(*args, to_logical=lambda ranks: translate(praw, ranks, active))
    if op in intercomms.OPS:
        return intercomms.own_args(op, args, active.Get_size())
    if op in PER_RANK:
        color, key, *info = args
        what = "color" if op == "Split" else "split_type"
        if color != MPI.UNDEFINED and (isinstance(color, bool) or not isinstance(color, int) or color < 0):
            raise ValueError(f"{op} {what} must be an int >= 0 or MPI.UNDEFINED, got {color!r}")
        if isinstance(key, bool) or not isinstance(key, int):
            raise TypeError(f"{op} key must be an int, got {key!r}")
        hints = topology.info_items(op, info[0]) if info else None
        return (color, key) if hints is None else (color, key, hints)
    if op == "Dup":
        return topology.info_items(op, args[0])
    if op == "Sub":
        return tuple(bool(d) for d in args[0])
    if op == "Create_cart":
        dims, periods, reorder = args
        dims = tuple(int(d) for d in dims)
        periods = tuple(bool(p) for p in periods) if periods is not None else (False,) * len(dims)
        if len(periods) != len(dims):
            raise ValueError(f"Create_cart: {len(dims)} dims but {len(periods)} periods")
        return (dims, periods, bool(reorder))
    group, tag = args  # Create_group, Create (tag None)
    if not isinstance(group, MPI.Group):
        raise TypeError(f"{op} takes an MPI.Group, got {type(group).__name__}")
    agroup = active.Get_group()
    members = MPI.Group.Translate_ranks(group, list(range(group.Get_size())), agroup)
    agroup.Free()
    return (tuple(members), tag)


def translate(src: MPI.Comm, ranks: list[int], dst: MPI.Comm) -> list[int]:
    """``ranks`` of ``src`` as ranks of ``dst``."""
    sg, dg = src.Get_group(), dst.Get_group()
    try:
        return list(MPI.Group.Translate_ranks(sg, ranks, dg))
    finally:
        sg.Free()
        dg.Free()
