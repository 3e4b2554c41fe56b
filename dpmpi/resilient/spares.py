"""An idle spare: it waits without spinning until a repair calls it in, or until the job ends.

It polls (with naps) a receive from itself on the protocol communicator, which only a revoke
completes (a repair begins), and its exit agreement on COMM_WORLD, which completes when every
active rank has ended; then it exits with status 0 without running user code. A nap ends early
when the failure watcher sees an active peer on the node end (a repair follows): the spare then
tests often, so it joins the repair within a fraction of a millisecond of its revoke."""
from __future__ import annotations

import ctypes
import time

from mpi4py import MPI

from dpmpi import _guard, _hooks, faults
from dpmpi.resilient import repair
from dpmpi.eventlog import log_event
from dpmpi.resilient.state import State

WAKE_TAG = 31_337
# an idle spare naps state.poll between tests, or until its watcher sees an active peer end; then
# a repair's revoke is on its way: it tests every HOT_POLL for up to HOT_SECONDS
HOT_POLL = 0.0002
HOT_SECONDS = 1.0


def post_exit_agreement(state: State, clean: bool = True) -> None:
    """Start this process's part of the job's exit agreement (state.exit_req, state.exit_flag);
    ``clean``: this process knows of no failure (the flag's AND tells every process whether one
    did: dpmpi_c.c, end_mpi)."""
    state.exit_flag[0] = int(clean)
    state.exit_req = MPI.COMM_WORLD.Iagree(state.exit_flag)
    # The request must outlive the interpreter: dpmpi's C exit handler finishes it.
    ctypes.pythonapi.Py_IncRef(ctypes.py_object(state.exit_req))
    ctypes.pythonapi.Py_IncRef(ctypes.py_object(state.exit_flag))
    _guard.adopt_exit_agreement(MPI._handleof(state.exit_req), state.exit_flag.buffer_info()[0])


def wait(state: State) -> None:
    """Block (without spinning) until called in, or until the job ends (then exit)."""
    with _hooks.idle():  # (not a hang for the stall watchdog, however long)
        _wait(state)


def _wait(state: State) -> None:
    faults.point("spare")  # lets tests kill an idle spare
    wake_buf = bytearray(1)
    wake = state.world.Irecv(wake_buf, source=state.world.Get_rank(), tag=WAKE_TAG)
    wall0, cpu0 = time.perf_counter(), time.process_time()
    hot_until = 0.0  # after a watched peer ended: test often until the repair's revoke arrives
    while True:
        try:
            assert state.exit_req is not None
            if state.exit_req.Test():  # every active rank ended: nothing to do
                wall = time.perf_counter() - wall0
                log_event({"event": "spare-exit", "process_id": state.process_id, "idle_s": round(wall, 3),
                           "cpu_fraction": round((time.process_time() - cpu0) / wall, 4) if wall > 0 else 0.0})
                _guard.exit_after_agreement(0, clean=bool(state.exit_flag[0]))
        except MPI.Exception:
            MPI.COMM_WORLD.Ack_failed()  # a process died; agree again (as the exit path does)
            post_exit_agreement(state, clean=False)
        try:
            if wake.Test():
                raise RuntimeError("dpmpi: unexpected message to an idle spare")
        except MPI.Exception as exc:
            if exc.Get_error_class() != MPI.ERR_REVOKED:
                raise
            repair.run(state, time.time())
            if state.logical() >= 0:
                return
            wake = state.world.Irecv(wake_buf, source=state.world.Get_rank(), tag=WAKE_TAG)
            hot_until = 0.0
        now = time.perf_counter()
        if now < hot_until:
            time.sleep(HOT_POLL)
        elif state.watcher is None:
            time.sleep(state.poll)
        elif state.watcher.nap(state.poll):
            hot_until = now + HOT_SECONDS
