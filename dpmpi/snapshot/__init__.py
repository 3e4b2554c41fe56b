"""``dpmpi.Snapshot``: in-memory, double-buffered snapshots with buddy replication.

A snapshot keeps, on every rank, the last committed copy of that rank's registered arrays in
memory that dpmpi owns (page-aligned, locked with ``mlock`` when the process may), plus copies of
its buddies' (by default its ring neighbour; on a job over several nodes, the next rank on
another node: ``dpmpi.placement``), so that a rank that dies can be restored on its
replacement without touching a disk::

    snap = dpmpi.Snapshot(comm, {"w": w, "m": m})    # local: registers the arrays
    for step in range(start, n):
        ...compute...                                  # may read w and m
        snap.commit(step - 1) if step > start else None  # collective: seal the staged copy
        w -= lr * g                                    # modify the state
        snap.stage()                                   # local: copying starts, returns at once
    epoch = snap.restore()                             # collective: after comm.Respawn()

Which calls communicate:

- ``Snapshot(...)``, ``stage()``, ``wait()``, ``close()``, ``epoch`` are local.
- ``commit(epoch)`` is collective over ``comm``: every rank commits the same epoch (the first
  commit also creates dpmpi's own communicator for snapshot traffic).
- ``restore()`` and ``Snapshot.load()`` are collective over ``comm``.

How the pieces fit (the C side is ``cext/dpmpi_snap.c``), one module each:

- ``layout``: where each array lives in a slot, and the checks on registered arrays.
- ``native``: slots of dpmpi-owned memory, the copy engine, the C module's constants.
- ``buffers``: two slots per rank. ``stage()`` writes the slot that does not hold the newest
  committed epoch, on C copy threads with the GIL released, checksumming as it copies;
  ``commit`` waits for the copy and seals the slot (epoch, length, checksum). A failure or an
  error in the middle of a copy leaves the committed slot untouched.
- ``replication`` (and ``replicator``, its C thread): after a commit, a C thread sends the slot
  to the buddies and receives theirs (non-blocking MPI, polled with short sleeps), then a
  barrier of its own point-to-point messages. The next copy waits for that barrier before it
  overwrites the older slot: an epoch's predecessor is dropped only when the epoch is held by
  every rank and every buddy, so some epoch is always restorable.
- ``plan``: pure decisions: who holds whose copies (``buddies``) and what a restore does
  (``plan_restore``).
- ``restore``: ``restore()`` agrees on the newest epoch whose copy survives for every rank,
  sends the copies that replacements need, verifies checksums, and writes the arrays back.
- ``persistence``: snapshot files (``persist_dir``) and ``Snapshot.load``.
- ``committer``: the background commits of ``stage(epoch)``.
- ``core``: the public ``Snapshot``.
"""
from dpmpi.snapshot.core import ENV_THREADS, Snapshot
from dpmpi.snapshot.errors import SnapshotCopyError, SnapshotLostError
from dpmpi.snapshot.plan import buddies, owners, plan_restore

__all__ = ["ENV_THREADS", "Snapshot", "SnapshotCopyError", "SnapshotLostError", "buddies", "owners",
           "plan_restore"]
