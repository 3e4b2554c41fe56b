"""Checks of what a program gives and does to ``dpmpi.Runtime`` (its arguments and ``run``'s, a declared
``same_start``, each step, the order of two Runtimes' runs); no MPI, no state of their own."""
from __future__ import annotations

from typing import Any, Sequence

from dpmpi.errors import failure_since


def runtime_args(comm_ok: bool, comm: Any, snapshot_every: Any) -> None:
    """Check ``Runtime``'s arguments (``comm_ok``: ``comm`` is a ``ResilientComm``)."""
    if not comm_ok:
        raise TypeError("Runtime needs the communicator returned by dpmpi.init() (it repairs it with "
                        f"Respawn); got {type(comm).__name__}")
    if isinstance(snapshot_every, bool) or not isinstance(snapshot_every, int) or snapshot_every < 1:
        raise ValueError(f"snapshot_every must be an int >= 1, got {snapshot_every!r}")


def run_args(step_fn: Any, n_steps: Any) -> None:
    """Check ``Runtime.run``'s arguments."""
    if not callable(step_fn):
        raise TypeError(f"run() takes a callable step_fn(step), got {type(step_fn).__name__}")
    if isinstance(n_steps, bool) or not isinstance(n_steps, int) or n_steps < 0:
        raise ValueError(f"n_steps must be an int >= 0, got {n_steps!r}")


def same_start(digests: Sequence[Any]) -> None:
    """``Runtime(same_start=True)``: every rank's epoch 0 (``digests``, by rank: the checksum of
    its starting arrays) must be the same, or a replacement would start from another rank's."""
    first = digests[0] if digests else None
    differ = [r for r, d in enumerate(digests) if d != first or d is None]
    if differ:
        raise ValueError(f"dpmpi.Runtime(same_start=True): the starting arrays of rank(s) {differ} differ from "
                         f"rank 0's (their checksums). same_start=True declares that every rank builds the same "
                         f"starting state (e.g. one seed for the weights); drop it when the ranks' states differ")


def step_ended(step: int, mark: int, updates: int) -> None:
    """After ``step_fn(step)`` returned. A peer's failure raised in it (``ProcFailedError`` or
    ``RevokedError``, since ``failures_made()`` was ``mark``) that the program's own ``except``
    caught is raised now and recovered as if it had not been caught: the step ran on a broken
    communicator, and a rank that went on stepping would keep the others waiting in the repair
    (seen: a survivor swallowed 65 steps' failures while its peers waited). Then: the step used
    ``rt.update()`` once."""
    caught = failure_since(mark)
    if caught is not None:
        raise caught
    if updates != 1:
        raise RuntimeError(f"step {step} did not modify the state inside 'with rt.update():'; the runtime "
                           f"snapshots around that block, so every step must use it once")


def no_alternation(ran_at: int | None, runs: int) -> int:
    """Refuse a run of a Runtime when another Runtime ran on its communicator since its last run
    (``ran_at``: what this returned at its last run, None before; ``runs``: every Runtime's runs
    so far, the same on every rank, a replacement's too): a recovery restores the running
    Runtime's arrays only (two models trained in alternate rounds, each with its own Runtime, hung
    at their first failure: twenty-fourth session). Before any MPI call. Returns the new ``ran_at``."""
    if ran_at is not None and ran_at != runs:
        raise RuntimeError("dpmpi.Runtime.run: another dpmpi.Runtime ran on this communicator since this one's "
                           "last run. Runs of two Runtimes cannot alternate: a recovery restores the arrays of "
                           "the one whose run is in progress only. Give one Runtime every array (dpmpi.Runtime("
                           "comm, {**state_a, **state_b})) and alternate inside its step (docs/runtime.md)")
    return runs + 1  # (the run about to begin)
