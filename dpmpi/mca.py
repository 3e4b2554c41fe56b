"""Open MPI's parameters (MCA) that dpmpi asks for, each unless the user set it: dpmpi-run puts
them on mpirun's command line (``--mca NAME VALUE``, for every program, C ranks too) and
``import dpmpi`` into a rank's environment (``OMPI_MCA_NAME``, for a rank started by plain mpirun).
Why each: the comments below, and docs/mpi-facts.md. No state."""
from __future__ import annotations

from typing import MutableMapping

from dpmpi import config

MCA_EVENT_TICK = "mpi_event_tick_rate"
# Open MPI's hierarchical collectives (coll/han), which it picks for a communicator that spans
# nodes, are not fault tolerant: in a repaired communicator's first Allreduce they segfaulted in
# mca_coll_han_comm_create (the simulated cluster, a death right after a restore; Open MPI issues
# 11794 and 13915, which also say that han drops its sub-collectives' errors: hangs after a
# failure). Excluded unless the user chose the coll components.
MCA_COLL, COLL_DEFAULT = "coll", "^han"
# Open MPI 5.0.11's TCP transport (between nodes) deadlocks a process when a peer dies during a
# large message sent by emulated RDMA put: closing the endpoint, with its lock held, completes the
# put with an error, ob1 answers with a FIN on that endpoint, whose send waits for the same lock
# (C stacks: mca_btl_tcp_frag_send -> mca_btl_tcp_endpoint_close -> ... mca_pml_ob1_send_fin ->
# mca_btl_tcp_endpoint_send -> pthread_mutex_lock; a Revoke from another thread then waits for it
# too). Seen in 2 of 25 runs of the Runtime-across-nodes test with 16 MiB per rank, 0 of 25
# without the put flag. Large messages then go as sends (the same socket either way).
MCA_TCP_FLAGS, TCP_FLAGS_DEFAULT = "btl_tcp_flags", "send,inplace,need-ack,need-csum,hetero-rdma"
MCA_DEFAULTS = ((MCA_COLL, COLL_DEFAULT), (MCA_TCP_FLAGS, TCP_FLAGS_DEFAULT))  # (each unless the user set it)


def event_tick() -> int:
    """Open MPI's event tick dpmpi asks for (microseconds; 0: Open MPI's own default)."""
    return int(config.get("DPMPI_MPI_EVENT_TICK"))


def settings() -> list[tuple[str, str]]:
    """(name, value) of every parameter dpmpi asks for, the event tick included when it is on."""
    tick = event_tick()
    return ([(MCA_EVENT_TICK, str(tick))] if tick > 0 else []) + list(MCA_DEFAULTS)


def set_defaults(env: MutableMapping[str, str]) -> None:
    """Each of ``settings()`` as ``OMPI_MCA_NAME`` in ``env``, unless it is there (mpirun passes
    its ``--mca`` settings to the ranks as these)."""
    for name, value in settings():
        env.setdefault("OMPI_MCA_" + name, value)
