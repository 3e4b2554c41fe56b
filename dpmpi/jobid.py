"""This job's identity: a tag that is the same on every process of one launch (its spares too)
and on the processes a repair spawns, and differs from one launch to the next.

The snapshot files a job writes to ``persist_dir`` carry it (``dpmpi.snapshot.persistence``):
before the fifty-first session a job reusing the directory of an earlier job took that job's
newer files for its own, both when it pruned (it deleted its own files, keeping the old job's
two newest) and when it restored from disk (two ranks killed together at step 300 of a 600-step
run: every rank went on from the earlier job's step 1200, and the job ended with that job's
result and exit code 0).

The tag is ``DPMPI_JOB_TAG`` (dpmpi-run sets a random one for each launch; a repair passes it to
the processes it spawns), else derived from the launch's PMIx namespace (plain mpirun: unique
among the launches running on that host, but a later launch may reuse a prterun's pid), else
from this process's pid (a singleton).

Owner: module state, set on first use (any thread; the value is the same whichever sets it)."""
from __future__ import annotations

import hashlib
import os

from dpmpi import config

ENV_TAG = "DPMPI_JOB_TAG"

_tag: str | None = None


def tag() -> str:
    """This job's tag: 16 lower-case hexadecimal digits."""
    global _tag
    if _tag is None:
        given = config.get(ENV_TAG)
        source = given or os.environ.get("PMIX_NAMESPACE", "") or f"pid {os.getpid()}"
        _tag = given if is_tag(given) else hashlib.sha256(source.encode()).hexdigest()[:16]
    return _tag


def new_tag() -> str:
    """A random tag for a new launch (dpmpi-run)."""
    return os.urandom(8).hex()


def is_tag(text: str) -> bool:
    return len(text) == 16 and all(c in "0123456789abcdef" for c in text)
