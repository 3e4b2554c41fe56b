"""Where this process runs: its node and CPUs, and taking over the CPUs of the rank it replaces
(the decision of which CPUs is ``plan.cpus_of_place``)."""
from __future__ import annotations

import os

from mpi4py import MPI

from dpmpi.resilient.plan import Place


def my_place() -> Place:
    """This process's node and the CPUs it may run on."""
    cpus = tuple(sorted(os.sched_getaffinity(0))) if hasattr(os, "sched_getaffinity") else ()
    return MPI.Get_processor_name(), cpus


def adopt_cpus(cpus: tuple[int, ...] | None) -> None:
    """Take the CPUs of the rank this process replaces (every thread of it), so that a spare
    that waited on a shared core does not leave the failed rank's core idle."""
    if not cpus or not hasattr(os, "sched_setaffinity"):
        return
    try:
        if set(cpus) == os.sched_getaffinity(0):
            return
        for tid in os.listdir("/proc/self/task"):
            try:
                os.sched_setaffinity(int(tid), cpus)
            except OSError:
                pass  # a thread that ended meanwhile, or CPUs this process may not use
    except OSError:
        pass
