"""Waiting for NCCL work without ever hanging.

NCCL does not notice a peer that died inside the node: its kernel spins and the async error
stays clean. So no wait here blocks on the device: ``wait`` polls, in turn,

1. the work's event (cudaEventQuery; the fake's messages),
2. the communicator's NCCL async error,
3. dpmpi's failure watcher (a pidfd notice of a local peer's death, see ``dpmpi.watcher``),
4. an MPI-side probe (``Probe``): a receive from any source on a duplicate of the MPI
   communicator, which ULFM completes in error when a process of it fails, or when a peer's
   repair revokes it (``NcclComm`` revokes its probe when a repair begins),
5. a deadline (``DPMPI_GPU_TIMEOUT``),

with naps from 20 us growing to 1 ms. The decision is a pure function (``decide``). The caller
aborts its NCCL communicator on any failure (every survivor does, since every survivor's wait
ends in one of 2-5) and raises it as ``ProcFailedError``/``RevokedError``.

Blocking calls that cannot be polled (ncclCommInitRank, ncclCommAbort) run under ``bounded``:
past the deadline the process ends as a failure (status record, SIGKILL), which the others
notice and repair, instead of hanging the job.
"""
from __future__ import annotations

import contextlib
import threading
import time
from typing import Any, Iterator

from mpi4py import MPI

from dpmpi import _guard, watcher
from dpmpi.comm import Comm
from dpmpi.mpicall import keep_forever
from dpmpi.errors import DpmpiError, ProcFailedError, from_mpi

_PROBE_TAG = 31_401
_NAP_MIN, _NAP_MAX = 20e-6, 1e-3
# a copy's wait (the snapshot's stage and restore) ends with the program's step on the device, so
# it overshoots by up to a nap (1 ms naps: 0.5 ms a step on average). On a 25 ms H200 step with 8
# MiB of device state the Runtime's overhead was 1.27 ms with 1 ms naps (one run) and 0.8-1.5 ms
# with these (four runs): within that machine's noise. It has no probe to test between naps
COPY_NAP_MAX = 100e-6


def decide(done: bool, async_error: str | None, failure_seen: bool, now: float, deadline: float) -> str:
    """What a wait does next: "done", "wait", or why it fails ("async-error", "peer-failed",
    "deadline"). Pure. An async error wins over completion (results after one are undefined);
    completed work wins over a failure notice (its results are whole; the notice stays and ends
    the next wait or MPI call)."""
    if async_error:
        return "async-error"
    if done:
        return "done"
    if failure_seen:
        return "peer-failed"
    if now >= deadline:
        return "deadline"
    return "wait"


def next_nap(nap: float, most: float = _NAP_MAX) -> float:
    """Naps double from 20 us to ``most`` (1 ms): short operations answer fast, long ones cost
    little CPU."""
    return min(most, max(_NAP_MIN, 2 * nap))


class Probe:
    """The MPI side's failure notice for one NCCL communicator (collective to create).

    Owner and lifetime: made and tested by the main thread; the duplicate communicator and its
    pending receive are kept for the life of the process (a pending request must outlive it)."""

    def __init__(self, comm: Any) -> None:
        self.comm = Comm(comm.mpi if isinstance(comm, Comm) else comm).Dup().mpi  # warmed up
        self.buf = bytearray(1)
        self.req = self.comm.Irecv(self.buf, MPI.ANY_SOURCE, _PROBE_TAG)
        keep_forever((self.comm, self.buf, self.req))
        self.error: DpmpiError | None = None

    def check(self) -> DpmpiError | None:
        """The failure the MPI side reports (latched), or None."""
        if self.error is None:
            try:
                if self.req.Test():
                    self.error = DpmpiError("dpmpi.gpu: unexpected message on the failure probe")
            except MPI.Exception as exc:
                self.error = from_mpi(exc, self.comm, "an NCCL wait (the MPI side's failure probe)")
        return self.error

    def revoke(self) -> None:
        """Tell the peers now (a repair begins on this process): their waits end."""
        try:
            self.comm.Revoke()
        except MPI.Exception:
            pass


def _notice(probe: Probe | None) -> BaseException | None:
    w = watcher.current()
    if w is not None and w.info()["noticed"]:
        return w.failure()
    return probe.check() if probe is not None else None


def wait(backend: Any, event: Any, raw: Any, probe: Probe | None, seconds: float, what: str) -> None:
    """Poll until ``event`` completes; raise ProcFailedError/RevokedError when it cannot (the
    caller aborts the communicator). Never blocks on the device. ``raw`` None: work that is not
    NCCL's (a copy, which needs no peer): only its deadline ends it, with a DpmpiError."""
    deadline = time.monotonic() + seconds
    nap = 0.0
    while True:
        done = backend.event_done(event)
        error = raw.async_error() if raw is not None else None
        seen = None if (done or error or raw is None) else _notice(probe)
        verdict = decide(done, error, seen is not None, time.monotonic(), deadline)
        if verdict == "done":
            return
        if verdict == "async-error":
            raise ProcFailedError(f"{what}: NCCL reported an asynchronous error ({error}); the communicator is "
                                  f"aborted and its results are undefined. Repair (comm.Respawn()) and restore the "
                                  f"state.", MPI.ERR_PROC_FAILED)
        if verdict == "peer-failed":
            raise seen  # type: ignore[misc]
        if verdict == "deadline" and raw is None:
            raise DpmpiError(f"{what} did not complete within {seconds:g} s (DPMPI_GPU_TIMEOUT): the device "
                             f"did not finish a copy (a kernel before it on the program's stream hangs?)")
        if verdict == "deadline":
            raise ProcFailedError(f"{what} did not complete within {seconds:g} s (DPMPI_GPU_TIMEOUT) and no peer "
                                  f"was seen to fail; the communicator is aborted. Repair (comm.Respawn()).",
                                  MPI.ERR_PROC_FAILED)
        time.sleep(nap)
        nap = next_nap(nap, COPY_NAP_MAX if raw is None else _NAP_MAX)


@contextlib.contextmanager
def bounded(seconds: float, what: str) -> Iterator[None]:
    """Run a blocking call that cannot be polled; past ``seconds`` this process ends as a failure.

    Owner and lifetime: one timer thread per call, which touches neither MPI nor the device; it
    is cancelled when the call returns."""
    timer = threading.Timer(seconds, _guard.die, (1, f"dpmpi.gpu: {what} did not return within {seconds:g} s "
                                                     f"(DPMPI_GPU_REBUILD_TIMEOUT); ending this process"))
    timer.name, timer.daemon = "dpmpi-gpu-deadline", True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()
