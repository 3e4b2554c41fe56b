"""Open MPI's shared-memory segments that killed ranks leave behind.

Each rank of a job on one node maps a segment file ``/dev/shm/sm_segment.HOST.UID.JOB.RANK``
(Open MPI's shared-memory transport) and unlinks it when it ends normally. A rank that is killed
(what dpmpi survives) never does, so every recovered death left one file (~70 KB of tmpfs
memory) until the node rebooted: about 900 after two days of this project's tests. dpmpi-run
removes, after its job, the segment files made since the job started that no live process maps
and that are at least ``MIN_AGE`` seconds old (a file a concurrent job has just made and not yet
mapped is left alone). Other nodes' files are not touched (dpmpi-run runs on one node).

The same holds for the backing files of one-sided windows (``/dev/shm/osc_sm.HOST.JOB.RANK.CID``,
Open MPI's ``sm`` component; the window's first rank unlinks it once every rank has mapped it): a
rank killed inside a window's creation left one behind (fiftieth session: 15 after about 300 jobs
of a program that made windows in every step, 4 KiB each there, the window's size in general).
"""
from __future__ import annotations

import os
import time

SHM = "/dev/shm"
PREFIXES = ("sm_segment.", "osc_sm.")  # (the shared-memory transport; one-sided windows)
MIN_AGE = 1.0


def orphans(files: list[tuple[str, float]], mapped: set[str], since: float, now: float) -> list[str]:
    """The segment files among ``files`` ((path, change time)) made since ``since``, at least
    ``MIN_AGE`` seconds before ``now``, that no live process maps. Pure."""
    return [path for path, ctime in files
            if os.path.basename(path).startswith(PREFIXES) and since <= ctime <= now - MIN_AGE and path not in mapped]


def _segments(directory: str) -> list[tuple[str, float]]:
    out = []
    try:
        names = os.listdir(directory)
    except OSError:
        return []
    for name in names:
        if name.startswith(PREFIXES):
            path = os.path.join(directory, name)
            try:
                out.append((path, os.stat(path).st_ctime))
            except OSError:
                pass
    return out


def _mapped(directory: str) -> set[str]:
    """Segment files that some live process of this machine maps (its /proc/PID/maps)."""
    mapped = set()
    markers = [os.path.join(directory, prefix) for prefix in PREFIXES]
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/maps") as maps:
                for line in maps:
                    for marker in markers:
                        i = line.find(marker)
                        if i >= 0:
                            mapped.add(line[i:].rstrip("\n").removesuffix(" (deleted)"))
        except OSError:
            continue
    return mapped


def remove_orphans(since: float, directory: str = SHM) -> int:
    """Unlink the orphaned segment files made since ``since`` (time.time()); how many."""
    files = _segments(directory)
    if not files:
        return 0
    removed = 0
    for path in orphans(files, _mapped(directory), since, time.time()):
        try:
            os.unlink(path)
            removed += 1
        except OSError:
            pass
    return removed
