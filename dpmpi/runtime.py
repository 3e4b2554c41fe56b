"""``dpmpi.Runtime``: a step loop that survives the death of a rank without recovery code.

The program describes its state (arrays) and one step; the runtime runs the steps, snapshots
the state, and when a peer fails inside a step it repairs the communicator (``Respawn``: a
spare takes the dead rank's place), restores the newest globally restorable snapshot on every
rank (the replacement gets the dead rank's copy from a buddy), and resumes at the step after
that snapshot (a program: the README's tour, ``examples/train_mlp.py``).

Snapshots: epoch ``e`` is the state after ``e`` steps (epoch 0: the state ``run`` starts with);
a later run first snapshots the state it starts from, which the code between the runs may have
changed (the Snapshot's own epoch numbers: ``dpmpi.epochs``). After the update of every
``snapshot_every``-th step the state is staged; the copy runs on C threads while the next step
computes and is committed (and replicated) in the background as soon as it is done;
``rt.update()`` of the next step waits for it (and, with ``bounded_loss``, for its replication)
before the state changes again. Snapshotting every step, a failure loses a step and the current.

Every step modifies the state only inside ``with rt.update():`` (once per step); deterministic
steps (of state, step number, rank) end a recovered run bit for bit where a failure-free one ends.
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
    restored by ``rt``: the epoch the last run ended with (durable by its commit and barrier; not
    the next run's start: ``_begin``), not copied back into a survivor's arrays, which hold it.
    Only when the last run ended on a committed epoch its arrays held (``_end``): else the
    program's (the same decision on every rank). Held weakly (the communicator outlives a
    Runtime). A Runtime made after another one's runs leaves such a failure to the earlier one
    until its own first run: the replacement restores in the earlier one's last run."""
    me, earlier = weakref.ref(rt), rt.comm.prologue.recover

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


def _held_end(rt: Runtime) -> int | None:
    """The committed epoch the arrays hold at the step ``rt`` is at, between two runs (the last
    run's end: ``_end``), or None (``commit_at_end=False`` took no snapshot of the final state, or
    it is the first run). The same answer on every rank."""
    hold = rt._arrays_hold
    if rt._pending is not None or hold is None or epochs.step_of(hold) != rt.step or rt.snapshot.epoch < hold:
        return None
    return hold


def _begin(rt: Runtime) -> None:
    """A run after one that ended on a committed epoch its arrays hold (``_end``) first snapshots
    the state it starts from (``epochs.run_start``), which the code since may have changed
    (before, a death ahead of the run's first snapshot lost that change: another result, no
    error). Collective (the same condition everywhere; not a replacement's first run); it ends
    with an agreement: a failure is repaired as one between the runs (arrays not copied back,
    the replacement redoes that code from the last run's end: ``at_most``). After a run whose
    final state was not snapshotted (``commit_at_end=False``: ``_unended``), the start is
    snapshotted anyway (45th session); a failure there, with no held end: the program's. A rank
    that left the agreement, its part done, as a repair began (``RevokedError``: the others may
    have seen it succeed and gone on) sets no bound; the restore's smallest bound decides."""
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
    """Stage, commit and wait for ``epoch`` (``_start``'s 0, ``_begin``'s run start; after the fault
    point ``point``: tests kill a rank before it, or +delay, while it is taken), then ``then()``,
    ending with an agreement: the ranks leave together or all raise ``ProcFailedError`` (before, a
    rank killed while epoch 0 was replicated ended the job: some went on to step 0). A rank whose
    part failed ends the replication and revokes its communicator, so that a peer whose
    replication waits for it fails its commit too, instead of never reaching the agreement."""
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
    """The final commit, then a barrier on the communicator: without it, ranks whose part of
    the final replication was done before a peer died (the background commit had sent it)
    left ``run`` and went on to exit while the others repaired without them (1 run in ~20).
    No rank passes the barrier while another is missing: a rank whose commit failed goes to
    the repair, whose revoke fails the barrier for the others, who join it. (An ``Agree``
    instead, as in ``_start``, made Open MPI's next ``Shrink`` leave live processes out in 4
    of 8 runs of that test: docs/mpi-facts.md.) Not ``final`` (``commit_at_end=False``): only
    a step's staged state is committed; the next run snapshots its start (``_begin``)."""
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
        # the arrays as built for this rank, until the first update (not on a warm spare, built
        # for no rank in particular and overwritten by its first restore, unless same_start; not
        # for a Runtime made after another one's runs: a replacement builds its state from what
        # the program started with, not from that Runtime's end, so a death in this one's first
        # snapshot, restored "as built", ended with other results, exit code 0, before the
        # fifty-first session: two_phases.py, 3:run-start@2:KILL; now a ValueError that says so)
        self.same_start = bool(same_start)
        self._as_built = (self.same_start or comm.role is not resilient.Role.SPARE) and not comm.prologue.runs
        self._updates, self._running, self._ran_at = 0, False, None  # update()s this step; in run(); no_alternation
        self._catching_up: Recovery | None = None
        self.closed, self._between = False, None  # close() was called; the hook _recover_between_runs sets
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
            elif self.snapshot.epoch < 0 and not skip:
                try:
                    self._start()
                except _RECOVERABLE as exc:  # (every rank: _start ends with an agreement)
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

    def _recover(self, caught: BaseException | None, starting: bool = False, at_most: int | None = None) -> None:
        """Repair, restore, and go on from the restored epoch. ``starting``: the failure came in
        ``_start`` (on every rank: it ends with an agreement); caught None: a replacement.
        ``at_most``: a failure between two runs restores no epoch newer than the one the arrays
        hold (not the next run's start, which the code between the runs, redone by the
        replacement, would change again: ``_begin``). In ``_start`` while a rank was still in
        its setup (``Prologue.behind``), nothing: the first snapshot is taken with it."""
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
