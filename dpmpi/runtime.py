"""``dpmpi.Runtime``: a step loop that survives the death of a rank without recovery code.

The runtime runs the program's steps and snapshots its state (epoch ``e``: the state after ``e``
steps; a later run first snapshots the state it starts from: ``dpmpi.epochs``); when a peer fails
inside a step it repairs the communicator (``Respawn``), restores the newest globally restorable
snapshot on every rank and resumes after it. A step modifies the state only inside ``with
rt.update():``, which stages the snapshot the copy threads take while the next step computes and
waits for the previous one's commit (docs/runtime.md).
"""
from __future__ import annotations

import contextlib
import sys
import time
import weakref
from typing import Any, Callable, Iterator, Mapping

from mpi4py import MPI

from dpmpi import epochs, faults, interrupts, resilient, runtime_checks as checks
from dpmpi.aliases import Aliases
from dpmpi.errors import DpmpiError, ProcFailedError, RevokedError, failures_made, peer_failure
from dpmpi.eventlog import log_event
from dpmpi.recovery import Recovery, in_prologue, last_repair, repaired_fields, stale_loop
from dpmpi.resilient import holding
from dpmpi.snapshot import Snapshot

_RECOVERABLE = (ProcFailedError, RevokedError)
_MAX_RECOVERY_ATTEMPTS = 32
_JUDGES = (resilient.Role.INITIAL, resilient.Role.SURVIVOR)  # (processes whose state is as the program built it)


def _recover_between_runs(rt: Runtime) -> None:
    """A peer's failure between two runs (in a collective the prologue watches) is repaired and
    restored by ``rt``: the epoch its last run ended with, if its arrays hold it (``_end``; else
    the program's), not copied back into a survivor's arrays. Held weakly. A Runtime made after
    another one's runs leaves such a failure to the earlier one until its own first run."""
    me, earlier = weakref.ref(rt), rt.comm.prologue.recover
    rt._earlier = earlier  # (_retake_start)

    def recover(caught: BaseException) -> None:
        runtime = me()
        if runtime is not None and not runtime.comm.prologue.runs and runtime.snapshot.epoch < 0:
            runtime.history.append(in_prologue(runtime.comm, caught, runtime._emit))
            return
        if runtime is not None and runtime.snapshot.epoch < 0 and earlier is not None:
            earlier(caught)
            return
        hold = _held_end(runtime) if runtime is not None and not runtime.closed else None
        if runtime is None or hold is None:
            raise caught
        runtime._recover(caught=caught, at_most=hold)
    rt.comm.prologue.recover = rt._between = recover


def _retake_start(rt: Runtime, caught: BaseException | None) -> bool:
    """A death in the first snapshot of a Runtime made after another one's runs, repaired as one
    between the runs (the replacement redoes the code since from the earlier Runtime's end:
    ``Prologue.retaking``), then every rank restores with its arrays as built and takes it again;
    a death in that restore starts over (``caught`` None: a replacement's first pass). False if
    the earlier one cannot (``_held_end``): ``_recover``'s ValueError (always, before session 52)."""
    if caught is not None and (not rt._after_runs or rt._earlier is None):
        return False
    for attempt in range(_MAX_RECOVERY_ATTEMPTS):
        if caught is not None:
            rt.comm.prologue.retaking = True
            try:
                rt._earlier(caught)
            except BaseException as exc:
                if exc is caught and not attempt:
                    return False
                raise
            finally:
                rt.comm.prologue.retaking = False
        rt._as_built = True
        try:
            rt._recover(caught=None, starting=True, retry=False)
            return True
        except _RECOVERABLE as exc:
            caught = exc
    raise ProcFailedError(f"the first snapshot's retake did not succeed in {_MAX_RECOVERY_ATTEMPTS} attempts "
                          f"(failures kept coming); last error: {caught}", MPI.ERR_PROC_FAILED)


def _held_end(rt: Runtime) -> int | None:
    """The committed epoch the arrays hold at the step ``rt`` is at, between two runs (the last
    run's end: ``_end``), or None (``commit_at_end=False`` took no snapshot of the final state, or
    it is the first run). The same answer on every rank."""
    hold = rt._arrays_hold
    if rt._pending is not None or hold is None or epochs.step_of(hold) != rt.step or rt.snapshot.epoch < hold:
        return None
    return hold


def _begin(rt: Runtime) -> None:
    """A run after one that ended on a committed epoch its arrays hold (``_end``), or whose end
    was not snapshotted (``_unended``), first snapshots the state it starts from, which the code
    since may have changed. Collective; it ends with an agreement: a failure is repaired as one
    between the runs (``at_most``; the replacement redoes that code). A rank that left the
    agreement, its part done, as a repair began (``RevokedError``) sets no bound."""
    unended, rt._unended = rt._unended, False
    while True:
        hold = _held_end(rt)  # (again after a recovery: the epoch it restored)
        if hold is None and not unended:
            return
        start = epochs.run_start(rt.step)
        try:
            _taken_together(rt, start, "run-begin", "a run's starting state")
            rt._arrays_hold = start
            return
        except _RECOVERABLE as exc:
            left = isinstance(exc, RevokedError)
            if hold is None and not left:
                raise
            rt._recover(caught=exc, at_most=None if left else hold)  # (then every rank, the replacement too,
            if rt._arrays_hold == start:  # takes it again, or goes on from it where it was taken everywhere)
                return


def _taken_together(rt: Runtime, epoch: int, point: str, what: str, then: Callable[[], None] = lambda: None) -> None:
    """Stage, commit and wait for ``epoch`` (after the fault point ``point``), then ``then()``,
    ending with an agreement: the ranks leave together or all raise ``ProcFailedError``. A rank
    whose part failed ends the replication and revokes its communicator (a peer's waits fail)."""
    done = 1
    try:
        faults.point(point)
        rt.snapshot.stage(epoch)
        rt.snapshot.commit(epoch)
        rt.snapshot.wait()
        then()
    except _RECOVERABLE:
        done = 0  # (still in the agreement: the others wait there)
        rt.snapshot.repair_begins()
    try:
        agreed = rt.comm.Agree(done)
    except RevokedError:  # (left when a repair began: ``_begin``; with this rank's part failed, not taken)
        if done:
            raise
        agreed = 0
    if not agreed:
        raise ProcFailedError(f"a rank failed while {what} was taken", MPI.ERR_PROC_FAILED)


def _end(rt: Runtime, final: bool = True) -> None:
    """The final commit, then a barrier (without it, ranks whose part of the final replication was
    done left ``run`` while the others repaired without them; an ``Agree`` made Open MPI's next
    ``Shrink`` leave live processes out: docs/mpi-facts.md). Not ``final``: only a staged step."""
    if final and rt._pending is None and rt._arrays_hold is None:  # (the last step's state was not
        rt._pending = epochs.after(rt.step)  # staged: a later run's _begin and a failure between runs need it)
        rt.snapshot.stage(rt._pending)
        rt._arrays_hold = rt._pending
    rt._commit_pending()
    rt.snapshot.wait()
    rt.comm.Barrier()


class Runtime:
    """Runs a step function over a resilient communicator, with snapshots and recovery.

    ``comm``: the communicator from ``dpmpi.init()``. ``state``: the arrays that make up this
    rank's state (see ``dpmpi.Snapshot``; a replacement registers the same names, dtypes and
    shapes). ``snapshot_every``: snapshot after every K-th step. ``bounded_loss`` (default True):
    before the state changes, wait until the last snapshot is also held by the buddies, so a
    failure loses at most ``snapshot_every`` steps plus the one in progress; False lets the
    replication run on into the next step (less waiting, and up to one more step lost).
    ``interrupt`` (default True): a peer's death noticed by dpmpi's failure watcher interrupts a
    step at once (``ProcFailedError`` at its next call or loop iteration, or out of a ``time.sleep``/
    lock wait; ``dpmpi.interrupts``), not at its next MPI call; False: never. ``confirm_steps``: end
    each step's update with an agreement (``comm.Agree``) before its state is snapshotted, so a
    step during which a peer died is redone even where a collective reported success without the
    dead peer's data (seen across nodes over TCP: docs/cluster.md); default: on when the job's
    processes run on more than one node. ``same_start`` (default False): every rank builds the same
    starting arrays (one seed), so a warm spare's are the starting state of any rank and a rank that
    dies before its first snapshot reached a buddy loses nothing (checked at the first snapshot).
    The other keyword arguments go to ``dpmpi.Snapshot``."""

    def __init__(self, comm: Any, state: Mapping[str, Any], *, snapshot_every: int = 1, replicas: int = 1,
                 threads: int | None = None, persist_dir: Any = None, persist_every: int = 0,
                 bounded_loss: bool = True, interrupt: bool = True, confirm_steps: bool | None = None,
                 same_start: bool = False) -> None:
        checks.runtime_args(isinstance(comm, resilient.ResilientComm), comm, snapshot_every)
        self.comm, self.snapshot_every = comm, snapshot_every
        self.bounded_loss, self.interrupt = bool(bounded_loss), bool(interrupt)
        self.confirm_steps = comm.nodes > 1 if confirm_steps is None else bool(confirm_steps)
        self.confirmed = 0  # steps confirmed by an agreement (confirm_steps)
        self.snapshot = Snapshot(comm, state, replicas=replicas, threads=threads, persist_dir=persist_dir,
                                 persist_every=epochs.every(persist_every))
        # (a step's `w = w - g`: an error; a replacement's state need not change from its first snapshots)
        self._aliases = Aliases(sys._getframe(1).f_globals, state, judge_unchanged=comm.role in _JUDGES,
                                tell=comm.role in _JUDGES and comm.Get_rank() == 0)
        self.step = 0  # the step being run (or the next one)
        self.history: list[Recovery] = []
        self._callbacks: list[Callable[[dict], None]] = []
        self._pending: int | None = None  # epoch staged and not yet committed
        self._arrays_hold: int | None = None  # the epoch the arrays hold unchanged since its stage (None: modified)
        # the arrays as built for this rank, until the first update (not on a warm spare, unless
        # same_start; not for a Runtime made after another one's runs: _retake_start)
        self.same_start, self._after_runs = bool(same_start), bool(comm.prologue.runs)
        self._as_built = (self.same_start or comm.role is not resilient.Role.SPARE) and not self._after_runs
        self._updates, self._running, self._ran_at = 0, False, None  # update()s this step; in run(); no_alternation
        self._catching_up: Recovery | None = None
        self.closed, self._between, self._earlier = False, None, None  # close(); _recover_between_runs's hooks
        self._unended = False  # the last run left its end to the next (commit_at_end=False: _begin)
        _recover_between_runs(self)

    # -- events --
    def on_event(self, callback: Callable[[dict], None]) -> None:
        """Call ``callback(event)`` (a dict, "event": failure/repaired/restored/caught-up/done) as the run goes."""
        if not callable(callback):
            raise TypeError(f"on_event() takes a callable(event), got {type(callback).__name__}")
        self._callbacks.append(callback)

    def _emit(self, event: str, **fields: Any) -> None:
        record = {"event": event, "rank": self.comm.Get_rank(), "time": time.time(), **fields}
        log_event({"source": "runtime", **record})
        for cb in list(self._callbacks):
            cb(record)

    # -- the step's update --
    @contextlib.contextmanager
    def update(self) -> Iterator[None]:
        """Wrap the code of a step that modifies the state: the previous snapshot is committed
        first (the copy overlapped the step's compute), the new one is staged after."""
        if not self._running:
            raise RuntimeError("rt.update() is for use inside the step function given to rt.run()")
        self._updates += 1
        if self._updates > 1:
            raise RuntimeError(f"step {self.step} entered rt.update() twice; modify the state in one block")
        self._commit_pending()
        self.snapshot.wait_refill(copy_only=True)  # (after a restore by page exchange: until its copy back is done)
        self._arrays_hold = None  # (from here until the next stage, the arrays change)
        self._as_built = False
        with interrupts.held():  # (never cut half-way: a thread pool's writes would race the restore)
            yield
        self._aliases.check(self.step)
        if self.confirm_steps:  # every rank ended the step with no peer lost (raises otherwise)
            self.comm.Agree(1)
            self.confirmed += 1
        if (self.step + 1) % self.snapshot_every == 0:
            self._pending = epochs.after(self.step + 1)
            self.snapshot.stage(self._pending)
            self._arrays_hold = self._pending

    def _commit_pending(self) -> None:
        if self._pending is not None:
            epoch, self._pending = self._pending, None
            # bounded loss: also wait for the replication (it ran during the step; usually done)
            self.snapshot.commit(epoch, durable=self.bounded_loss)
            own = epochs.by_step(self.snapshot.holdings().get(self.comm.Get_rank(), {}))
            self._aliases.committed(epochs.step_of(epoch), own, self.snapshot_every)

    # -- the loop --
    def run(self, step_fn: Callable[[int], Any], n_steps: int, *, commit_at_end: bool = True) -> list[Recovery]:
        """Run ``step_fn(step)`` for the steps not yet done, up to ``n_steps`` (collective).

        A replacement (``comm.role is Role.RECOVERED``) first restores the state, in the run its
        survivors are in (those they had finished return at once). A run after one first snapshots
        its starting state (``_begin``). At the end the final state is committed and replicated,
        and every rank passes a barrier (``commit_at_end=False``: the barrier, and the commit of a
        snapshot step's state only; a next run snapshots the state it starts from). Its recoveries."""
        checks.run_args(step_fn, n_steps)
        record = self.comm.prologue  # (for a replacement: what the program does outside its runs)
        self._ran_at = checks.no_alternation(self._ran_at, record.runs)
        self._running = True
        self._aliases.watch_step(step_fn)
        try:
            _begin(self)  # (before run_begins: a failure there is one between two runs)
            record.run_begins(tell=self.comm.role is not resilient.Role.SPARE and self.comm.Get_rank() == 0)
            if self.comm.role is resilient.Role.SPARE:
                self.comm.Await()  # a warm spare (dpmpi.init(wait=False)): returns once called in
            skip = record.finished_by_survivors()  # (a replacement's run its survivors finished: not run)
            if self.comm.role is resilient.Role.RECOVERED and self.snapshot.epoch < 0 and record.restores():
                record.restoring()
                self._recover(caught=None)
                if skip:  # (its survivors failed after this run: the program's code next modifies the arrays)
                    self.snapshot.wait_refill()
            elif self.snapshot.epoch < 0 and record.retakes():  # (a replacement, maybe SURVIVOR since)
                _retake_start(self, None)
            elif self.snapshot.epoch < 0 and not skip:
                try:
                    self._start()
                except _RECOVERABLE as exc:  # (every rank: _start ends with an agreement)
                    if not _retake_start(self, exc):
                        self._recover(caught=exc, starting=True)
            while not skip:
                try:
                    while self.step < n_steps:
                        if self._catching_up is not None and self.step >= self._catching_up.failed_step:
                            self._catching_up, caught = None, self._catching_up
                            caught.caught_up(self.step, self._emit)
                        self._updates = 0
                        faults.runtime_step()  # (point "step": DPMPI_FAULTS=RANK:step@N faults any Runtime program)
                        mark = failures_made()
                        with interrupts.armed(self.interrupt):  # dpmpi calls inside are never interrupted
                            step_fn(self.step)
                        checks.step_ended(self.step, mark, self._updates)
                        self.step += 1
                    if self._catching_up is not None:
                        self._catching_up, caught = None, self._catching_up
                        caught.caught_up(self.step, self._emit)
                    if commit_at_end:  # the final state is a committed epoch too (a failure here is
                        faults.point("run-end")  # recovered like one inside a step)
                        _end(self)
                    else:  # (ended together all the same: ranks in two runs could not recover as one)
                        _end(self, final=False)
                        self._unended = self._arrays_hold is None
                    break
                except _RECOVERABLE as exc:  # (the step's frames let go of: their closures may hold its communicators)
                    self._recover(caught=holding.let_go_of(exc))
                except MPI.Exception as exc:  # raised by mpi4py itself (MPI.Request.Waitall(reqs), comm.mpi...)
                    if isinstance(exc, DpmpiError):  # (dpmpi's own: not a peer's failure)
                        raise
                    failure = peer_failure(exc, self.comm.mpi) or interrupts.noticed_failure()
                    if failure is None:
                        raise
                    holding.let_go_of(exc)
                    self._recover(caught=failure)
        finally:
            self._running = False
            record.run_ends()
        self._emit("done", step=self.step, epoch=epochs.step_of(self.snapshot.epoch))
        return list(self.history)

    def _start(self) -> None:
        """Epoch 0, the starting state, safe everywhere before the first step (collective; it ends
        with an agreement: ``_taken_together``)."""
        self._arrays_hold = 0  # (the arrays as the program built them: epoch 0 wherever it is held)

        def same_start() -> None:  # (a ValueError on every rank alike: the same digests everywhere)
            if self.same_start:
                checks.same_start(self.comm.allgather(self.snapshot.holdings()[self.comm.Get_rank()].get(0)))
        _taken_together(self, epochs.after(0), "run-start", "the first snapshot", same_start)
        self.step = 0

    def _recover(self, caught: BaseException | None, starting: bool = False, at_most: int | None = None,
                 retry: bool = True) -> None:
        """Repair, restore, and go on from the restored epoch. ``starting``: the failure came in
        ``_start`` (on every rank); caught None: a replacement (or ``_retake_start``). ``at_most``:
        no epoch newer (a failure between two runs: not the next run's start, ``_begin``). While a
        rank was still in its setup (``Prologue.behind``), nothing. ``retry``: repair again."""
        caught_at = time.time()
        failed_step = self.step if caught is not None and not starting else -1
        detected_by = (getattr(caught, "noticed_by", "") or "mpi") if caught is not None else ""
        if caught is not None:
            self._emit("failure", step=self.step, error=type(caught).__name__, detected_by=detected_by)
        self._pending = None
        attempts = 0
        while True:
            attempts += 1
            try:
                if caught is not None or attempts > 1:
                    self.comm.Respawn()
                repaired_at = time.time()
                repair = last_repair(self.comm)
                if caught is not None or attempts > 1:
                    self._emit("repaired", **repaired_fields(repair))
                # unknown until it succeeds (a failure inside it may have written some arrays back)
                hold, self._arrays_hold = self._arrays_hold, None
                # where the survivors were travels in the restore's first collective (a round trip
                # of its own waited 20-30 ms behind the re-replication in half the jobs); with
                # DPMPI_SWAP_MIN, survivors swap pages with their copy (its refill: update() waits)
                behind = starting and self.comm.prologue.behind  # (a rank still in its setup: none exists)
                epoch = -1 if behind else self.snapshot.restore(arrays_hold=hold, carry=failed_step, swap=True,
                                                                as_built=self._as_built, at_most=at_most)
                if epoch < 0:  # every rank failed or was called in during _start, or one is behind: epoch 0 again
                    self._start()
                    epoch = 0
                else:
                    self._as_built = epoch == 0  # (epoch 0: the arrays as built, for this rank)
                self._arrays_hold = epoch
                restored_at = time.time()
                failed_step = failed_step if behind else int(self.snapshot.last_restore["carried"])
                break
            except _RECOVERABLE as exc:
                if not retry:  # (the caller repairs: _retake_start)
                    raise
                if attempts >= _MAX_RECOVERY_ATTEMPTS:
                    raise ProcFailedError(f"recovery did not succeed in {attempts} attempts (failures kept "
                                          f"coming); last error: {exc}", MPI.ERR_PROC_FAILED) from exc
                continue  # another failure during the recovery: repair again
        self.step = epoch = epochs.step_of(epoch)
        record = Recovery(failed_step=failed_step, restored_epoch=epoch, error=type(caught).__name__ if caught else "",
                          caught_at=caught_at, repaired_at=repaired_at, restored_at=restored_at, resumed_at=time.time(),
                          repair=repair, restore=dict(self.snapshot.last_restore), attempts=attempts,
                          detected_by=detected_by, noticed_at=float(getattr(caught, "noticed_at", 0.0) or 0.0))
        self.history.append(record)
        self._catching_up = record
        self._emit("restored", epoch=epoch, failed_step=failed_step, steps_recomputed=record.steps_recomputed,
                   restore_ms=round(record.restore_ms, 3), repair_ms=round(record.repair_ms, 3),
                   role=self.comm.role.value, detail=record.restore)
        if (stuck := stale_loop(self.history)) is not None:  # (the same on every rank: agreed inputs)
            raise stuck

    def close(self) -> None:
        """Stop the snapshot's threads and free its memory (local); a failure between runs after
        it is the program's (nothing to restore)."""
        self.closed = True
        if self.comm.prologue.recover is self._between:  # (no agreement after the calls between runs)
            self.comm.prologue.recover = None
        self.snapshot.close()
