"""How ``dpmpi.Runtime`` numbers its snapshot's epochs (pure).

A Snapshot's epochs must grow, and the Runtime takes two kinds of snapshot at one step: the state
after ``step`` steps (its first, every ``snapshot_every``-th step's, a run's end: ``after``), and
the state a later run starts from (``run_start``), which the program's code between two runs may
have changed (a learning-rate schedule applied to the weights, a field renormalised). Before the
forty-third session a run took no snapshot at its start: a death in a later run before that
run's first snapshot restored the epoch the previous run ended with, or an older one, and every
rank stepped on without what the code between the runs had done, to another result and no
error (``tests/programs/derived_setup.py``, rank 1 killed at the second run's first step).
Events, ``Recovery`` records, the step number the program sees and ``persist_every`` count
steps (``step_of``, ``every``); the Snapshot's own epochs (``rt.snapshot``, its files in
``persist_dir``) are these numbers."""
from __future__ import annotations


def after(step: int) -> int:
    """The epoch of the state after ``step`` steps."""
    return 2 * step


def run_start(step: int) -> int:
    """The epoch of the state a run that begins at ``step`` starts from (after ``after(step)``,
    before ``after(step + 1)``)."""
    return 2 * step + 1


def step_of(epoch: int) -> int:
    """The step an epoch's state is at (-1 stays -1: nothing restored)."""
    return epoch // 2 if epoch >= 0 else epoch


def by_step(held: dict[int, int]) -> dict[int, int]:
    """``{epoch: checksum}`` of the states after a number of steps, by that number (the runs'
    starts left out)."""
    return {step_of(e): c for e, c in held.items() if e >= 0 and e % 2 == 0}


def every(steps: object) -> object:
    """The Snapshot's ``persist_every`` for a Runtime's (every ``steps``-th step's state on disk,
    as before these numbers; its epochs whose number ``steps`` divides); anything but an int
    above 0 as given (0: off; the Snapshot refuses a wrong one in the program's own words)."""
    if isinstance(steps, int) and not isinstance(steps, bool) and steps > 0:
        return after(steps)
    return steps
