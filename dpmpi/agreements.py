"""Agreements (``Agree``/``Iagree``) on a program's communicators, and the repair's part in
the ones a repair interrupted.

An agreement completes, even on a revoked communicator, only once every live process has
entered it. A collective can fail on some processes and complete on others (across nodes over
TCP it often does: docs/cluster.md), so a program that confirms a step with ``Agree`` inside the
``try`` whose ``except`` calls ``Respawn`` (as ``Runtime(confirm_steps=True)`` does) had a
process wait in that ``Agree`` while its peers waited for it in the repair, until the repair
deadline split the job (4 of 30 runs of a node's loss on the simulated cluster). So ``agree``
gives up once a repair has begun (the job's protocol communicator is revoked, which ``Respawn``
alone does) and raises the revoke: that process joins the repair too.

The agreement it left is still open in Open MPI, which names it at ``MPI_Finalize`` ("ERA
ERRONEOUS: Agreement ID ... was started by some processor, but I never completed to it").
So the repair closes it: every process brings the number of the agreement it abandoned on the
active communicator (``abandoned_word``) into the repair's first exchange, and a process that
had not yet entered that agreement enters it then (``join_abandoned``); with every live member
in it, it completes on all of them.

Owner of state: this module. ``_STARTED`` (agreements started through dpmpi on each
communicator, by MPI handle), ``_ABANDONED`` (the agreement given up on each), ``_PENDING``
and ``_DECIDED`` (that agreement's request, and how it ended once asked) are updated
from the thread that calls ``Agree``/``Iagree`` or runs the repair (single dict updates, atomic
under the GIL), and kept for the life of the process, as are the abandoned requests (``keep_forever``).
Keyed by handle: a communicator that the program frees can leave its counts to a later one that
Open MPI puts at the same address. The worst that does is a wrong ``join_abandoned`` decision,
which leaves one agreement open (the line at ``MPI_Finalize``); nothing waits for a joined one."""
from __future__ import annotations

import array
from typing import Any

from mpi4py import MPI

from dpmpi.mpicall import done_unless_revoked, exchange, keep_forever, resilient_job_comm

_STARTED: dict[int, int] = {}
_ABANDONED: dict[int, int] = {}
_PENDING: dict[int, tuple[MPI.Request, Any]] = {}  # the agreement given up on each: its request and buffer
_DECIDED: dict[int, bool] = {}  # how the one given up on each ended, once waited for (``outcome``)
NONE = -1  # all bits set: neutral in the repair's bitwise AND


def _started(comm: MPI.Comm) -> int:
    key = MPI._handleof(comm)
    count = _STARTED.get(key, 0) + 1
    _STARTED[key] = count
    return count


def iagree(comm: MPI.Comm, flag: Any) -> MPI.Request:
    """``comm.Iagree(flag)``, counted."""
    _started(comm)
    return comm.Iagree(flag)


def agree(comm: MPI.Comm, flag: int) -> int:
    """``comm.Agree(flag)`` that gives up when a repair begins before it completes: raises
    ``MPI.Exception`` ``ERR_REVOKED`` then (the caller makes it dpmpi's ``RevokedError``). Left
    as Open MPI's when no resilient job communicator exists (no ``dpmpi.init``) or ``comm`` is
    that communicator: a program's own revoke of its communicator, then ``Agree`` on it, is a
    ULFM idiom."""
    watch = resilient_job_comm()
    if watch == MPI.COMM_NULL or watch == comm:
        _started(comm)
        return int(comm.Agree(flag))
    if not watch.Is_revoked():
        count = _started(comm)
        buf = array.array("i", [flag])
        req = comm.Iagree(buf)
        if done_unless_revoked(req, watch):
            return buf[0]
        keep_forever((comm, req, buf))  # (still open in Open MPI: its buffer lives on)
        _ABANDONED[MPI._handleof(comm)] = count
        _PENDING[MPI._handleof(comm)] = (req, buf)
        _DECIDED.pop(MPI._handleof(comm), None)
    raise MPI.Exception(MPI.ERR_REVOKED)


def abandoned_word(comm: MPI.Comm) -> int:
    """What this process brings to the repair's AND about ``comm`` (the active communicator
    before the repair, or ``MPI.COMM_NULL``): the number of the agreement it gave up there, else
    ``NONE``. Every process that gave one up there gave up the same one (no process starts an
    agreement before the previous one completed on every live member, and this one did not)."""
    if comm == MPI.COMM_NULL:
        return NONE
    return _ABANDONED.get(MPI._handleof(comm), NONE)


def join_abandoned(comm: MPI.Comm, anded: int, flag: int = 1) -> bool:
    """After the repair's AND of every live process's ``abandoned_word``: when some process
    gave up agreement ``anded`` on ``comm`` and this process had not entered it yet, enter it
    now with ``flag``, non-blocking (the others are in it, so it completes as MPI progresses).
    Returns whether it did."""
    if anded == NONE or comm == MPI.COMM_NULL or _STARTED.get(MPI._handleof(comm), 0) != anded - 1:
        return False
    buf = array.array("i", [flag])
    try:
        req = iagree(comm, buf)
    except MPI.Exception:
        return False  # (nothing to close here: Open MPI refused the agreement outright)
    keep_forever((comm, req, buf))
    return True


def abandoned_on(comms: list[Any]) -> dict[int, int]:
    """The agreements this process gave up on the communicators ``comms`` (a repair's derived
    ones, by place; None: not a member): {place: the agreement's number}."""
    out = {}
    for place, comm in enumerate(comms):
        word = NONE if comm is None else abandoned_word(comm)
        if word != NONE:
            out[place] = word
    return out


def join_derived(comm: MPI.Intracomm, derived: list[Any], mine: dict[int, int]) -> None:
    """In a repair in which some process gave up an agreement on a derived communicator (a
    prologue call's, dpmpi.resilient.prologue_derived), over its new active communicator
    ``comm``, on every process of it: each brings ``abandoned_on``'s answer, and each member of
    such a communicator (``derived``, by place, its old ones) that had not entered that agreement
    enters it (``join_abandoned``) with 0, as it did not make the call agreed on, so that it
    completes (else Open MPI names it at ``MPI_Finalize``: "ERA ERRONEOUS ... I never completed
    to it") and says the call failed (``outcome``). One allgather."""
    for told in exchange(lambda: comm.allgather(mine)):
        for place, number in told.items():
            if place < len(derived) and derived[place] is not None:
                join_abandoned(derived[place], number, 0)


def outcome(handle: int) -> bool:
    """After the repair that made this process give up an agreement on the communicator whose
    MPI handle was ``handle`` then (a derived communicator's, closed by ``join_derived``; the
    repair gives the program's object the rebuilt one's handle): whether it completed with every
    member's flag set (the call it agreed on succeeded everywhere: the members that saw it
    complete went on). False where none was given up or it failed. The same answer to every
    question until another is given up there: the repair asks first, to hand a replacement the
    call with its group's record when it succeeded (``prologue_derived``), the call's own code
    after the repair."""
    if handle not in _DECIDED:
        _DECIDED[handle] = _ended_well(_PENDING.pop(handle, None))
    return _DECIDED[handle]


def _ended_well(pending: tuple[MPI.Request, Any] | None) -> bool:
    if pending is None:
        return False
    req, buf = pending
    try:
        req.Wait()
    except MPI.Exception:
        return False
    return bool(buf[0] & 1)
