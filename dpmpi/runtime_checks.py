"""Pure checks of what a program gives ``dpmpi.Runtime`` (its ``run`` arguments, a declared
``same_start``); no MPI, no state."""
from __future__ import annotations

from typing import Any, Sequence


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
