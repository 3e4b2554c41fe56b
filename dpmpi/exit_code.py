"""The exit code of a job that dpmpi-run ran, and its one-line account, from the ranks' status
records (mpirun's own exit code is 0 under --with-ft ulfm even when every rank was killed). Pure."""
from __future__ import annotations

import re
from typing import Callable


def job_exit_code(n: int, records: dict[int, dict], mpirun_rc: int, expect_records: bool = False) -> tuple[int, str]:
    """The job's exit code, and a one-line account when something failed. ``expect_records``:
    every rank runs the exit guard, so a rank without a record was killed by a signal. A rank
    whose MPI_Finalize crashed in a job that knew of no failure (its record's ``finalize_crash``:
    the signal) counts as completed, but the job's exit code is 128 + that signal, as mpirun's
    (before the fifty-second session: 0 and no word of it at the exit, and "killed by a
    signal", exit code 1, in a C program's own MPI_Finalize)."""
    crashed = {r: int(rec["finalize_crash"]) for r, rec in records.items() if rec.get("finalize_crash")}
    code, account = _job_exit_code(n, {r: dict(rec, status=0) if r in crashed else rec for r, rec in records.items()},
                                   mpirun_rc, expect_records)
    if not crashed:
        return code, account
    first, sig = min(crashed), crashed[min(crashed)]
    where = (f"rank {first} (signal {sig})" if len(crashed) == 1
             else f"ranks {_spans(sorted(crashed))} (the first: signal {sig})")
    note = f"MPI_Finalize crashed in {where}, with no failure in the job (the MPI library's report above)"
    return code or 128 + sig, f"{account}; {note}" if account else note


def _job_exit_code(n: int, records: dict[int, dict], mpirun_rc: int, expect_records: bool) -> tuple[int, str]:
    if not records:
        if expect_records and n > 0 and mpirun_rc != 0:  # (mpirun --with-ft says 0 when ranks die)
            return mpirun_rc, (f"mpirun ended with exit code {mpirun_rc} and no rank left a status: mpirun's own "
                               f"error, its message above (e.g. a placement it could not map), unless every rank "
                               f"was killed; no rank completed")
        if expect_records and n > 0:  # every rank died by a signal (mpirun --with-ft still says 0)
            return 1, "every rank died without a status (killed by a signal); no rank completed"
        return mpirun_rc, ""
    completed = {r for r, rec in records.items() if rec.get("status") == 0}
    failed = {r: rec for r, rec in records.items() if rec.get("status") != 0}
    silent = [r for r in range(n) if r not in records]  # killed by a signal from outside
    failed_ranks = sorted(set(failed) | set(silent))
    if not failed_ranks:
        return 0, ""
    recovered: set[int] = set()
    for r in completed:
        recovered.update(records[r].get("recovered", []))
        # a spare that died while idle held no work: nothing to recover
        recovered.update(records[r].get("idle_spares", []))

    def why(r: int) -> str:
        rec = failed.get(r)
        if rec is None:
            return f"rank {r} died (no status: killed by a signal)"
        cause = f", {rec['cause']}" if rec.get("cause") else ""
        return f"rank {r} failed (status {rec['status']}{cause})"

    def listing(ranks: list[int]) -> str:
        return ranks_account(ranks, failed, why)

    first_status = next((failed[r]["status"] for r in failed_ranks if r in failed), 1) or 1
    if not completed:
        return first_status, listing(failed_ranks) + "; no rank completed"
    # Only a repair recorded by a rank that completed (dpmpi's Shrink) makes a failure
    # recovered; a rank that completed without one may simply not have needed the lost rank's
    # work, and its result is incomplete.
    unrecovered = [r for r in failed_ranks if r not in recovered]
    if unrecovered:
        status = next((failed[r]["status"] for r in unrecovered if r in failed), 1) or 1
        return status, listing(unrecovered) + "; no rank that completed repaired around it"
    stuck = left_out(failed)
    if stuck:  # (live processes that the completed ranks' repair counted as failed)
        return failed[stuck[0]]["status"] or 1, (
            listing(failed_ranks) + f"; the other {len(completed)} rank(s) completed, but "
            f"{len(stuck)} live rank(s) were left out of a repair and ended at its deadline: the job split "
            f"(docs/limitations.md), its results are not the whole job's")
    again = repeated_error(failed)
    if again:  # (recovered, but from a program error that every replacement met again)
        return failed[again[0]]["status"] or 1, (
            listing(failed_ranks) + f"; the other {len(completed)} rank(s) completed, but the "
            f"same uncaught error ended {len(again)} ranks: a program error (that replacements repeated, or a peer's "
            f"death that the program left unhandled on those ranks), not a fault the job recovered from")
    return 0, listing(failed_ranks) + f"; the other {len(completed)} rank(s) recovered and completed"


# how many failed ranks an account names one by one; the rest are counted (a job of 512 ranks
# that all raised the same error wrote an account line of one cause per rank)
LISTED = 16


def ranks_account(ranks: list[int], failed: dict[int, dict], why: Callable[[int], str]) -> str:
    """The account's part that names ``ranks`` (sorted): ``why(r)`` for each, but a cause already
    given for an earlier rank with the same status is not written again ("the same cause as rank
    R"; before the fifty-first session four ranks that raised the same error gave a line of ~1,000
    characters), and past LISTED ranks the rest are counted."""
    parts, first = [], {}
    for r in ranks[:LISTED]:
        rec = failed.get(r)
        cause = str(rec.get("cause") or "") if rec is not None else ""
        key = (rec["status"], cause) if rec is not None and cause else None
        if key is not None and key in first:
            parts.append(f"rank {r} failed (status {rec['status']}, the same cause as rank {first[key]})")
            continue
        if key is not None:
            first[key] = r
        parts.append(why(r))
    rest = ranks[LISTED:]
    if rest:
        dead = sum(1 for r in rest if r not in failed)
        parts.append(f"{len(rest)} more rank(s) ({_spans(rest)}) failed ({dead} of them died without a status)")
    return "; ".join(parts)


def _spans(ranks: list[int]) -> str:
    """Sorted ranks as ranges: [3, 4, 5, 9] -> "3-5, 9"."""
    out, start = [], None
    for i, r in enumerate(ranks):
        if start is None:
            start = r
        if i + 1 == len(ranks) or ranks[i + 1] != r + 1:
            out.append(str(start) if start == r else f"{start}-{r}")
            start = None
    return ", ".join(out)


def repeated_error(failed: dict[int, dict]) -> list[int]:
    """The ranks that the same uncaught Python error ended, when it ended more than one (a bug
    that a replacement redoing the step meets again: before the twenty-fourth session a job whose
    step raised on rank 1 at step 50 went through its spare, shrank to one rank, and ended with
    exit code 0); else []. The largest such group, lowest ranks first. Lists of ranks in the
    errors do not tell them apart: two ranks that a peer's death ended in a setup's ``Sendrecv``
    said "failed ranks known here: [2]" and "[1, 2]", and the job's exit code was 0 or 1 by
    which of them each rank had learnt when it raised (forty-seventh session, CI)."""
    by_cause: dict[str, list[int]] = {}
    for r, rec in sorted(failed.items()):
        cause = str(rec.get("cause") or "")
        if cause.startswith("uncaught "):
            by_cause.setdefault(_RANK_LIST.sub("[...]", cause), []).append(r)
    return max((ranks for ranks in by_cause.values() if len(ranks) > 1), key=len, default=[])


_RANK_LIST = re.compile(r"\[\d+(?:, \d+)*\]")


# in the cause of a rank that its repair deadline ended (dpmpi.resilient.watchdog writes it)
REPAIR_DEADLINE = "(DPMPI_REPAIR_TIMEOUT)"
# in the cause of a rank that a creation stuck inside Open MPI after a death ended
# (dpmpi.resilient.stuck_creation writes it)
STUCK_CREATION = "stuck inside Open MPI's creation of an intercommunicator"


def left_out(failed: dict[int, dict]) -> list[int]:
    """The ranks that the repair deadline ended: live processes stuck in a repair. When other
    ranks completed, their repair went on without these (seen: Open MPI's Shrink left three live
    processes out and the fourth went on alone; before the twenty-fifth session dpmpi-run called
    that job recovered, exit code 0)."""
    return [r for r, rec in sorted(failed.items()) if REPAIR_DEADLINE in str(rec.get("cause") or "")]
