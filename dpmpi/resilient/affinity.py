"""Where this process runs: its node and CPUs, and taking over the CPUs of the rank it replaces
(the decision of which CPUs is ``plan.cpus_of_place``)."""
from __future__ import annotations

import os

from mpi4py import MPI

from dpmpi.resilient.plan import Place


def cpu_list(text: str) -> set[int]:
    """CPUs from a kernel CPU list such as ``0-3,8,10-11`` (pure; ValueError if malformed)."""
    cpus: set[int] = set()
    for part in text.strip().split(","):
        if not part:
            continue
        first, _, last = part.partition("-")
        cpus.update(range(int(first), int(last or first) + 1))
    return cpus


def helper_cpus(places: dict[int, Place], node: str, allowed: set[int]) -> tuple[int, ...]:
    """The CPUs of ``node`` among ``allowed`` (the job's share of it) that no process of the job
    on that node is bound to (pure): where the snapshot's copy and replication threads can run
    without taking time from any rank. Empty when a process there has no known CPUs."""
    bound: set[int] = set()
    for where, cpus in places.values():
        if where != node:
            continue
        if not cpus:
            return ()
        bound.update(cpus)
    return tuple(sorted(allowed - bound))


def nearest(helpers: tuple[int, ...], numa_nodes: list[set[int]], mine: tuple[int, ...]) -> tuple[int, ...]:
    """Of ``helpers``, those on the NUMA nodes of this process's CPUs ``mine`` (``numa_nodes``:
    each node's CPUs), so that a copy does not cross sockets; all of them when none is (pure)."""
    local = set().union(*(n for n in numa_nodes if n & set(mine)))
    near = tuple(c for c in helpers if c in local)
    return near or helpers


def numa_nodes() -> list[set[int]]:
    """Each NUMA node's CPUs (Linux sysfs); empty when unknown."""
    nodes = []
    try:
        for name in os.listdir("/sys/devices/system/node"):
            if name.startswith("node") and name[4:].isdigit():
                with open(f"/sys/devices/system/node/{name}/cpulist") as f:
                    nodes.append(cpu_list(f.read()))
    except (OSError, ValueError):
        return []
    return nodes


def launcher_cpus() -> set[int]:
    """The CPUs the process that started this one may run on (Open MPI's launcher or daemon on
    this node: the job's share of the node); empty when unknown."""
    try:
        with open(f"/proc/{os.getppid()}/status") as f:
            for line in f:
                if line.startswith("Cpus_allowed_list:"):
                    return cpu_list(line.split(":", 1)[1])
    except (OSError, ValueError):
        pass
    return set()


def use_helper_cpus(cpus: tuple[int, ...]) -> int:
    """Run the copy and replication threads of this process's Snapshots on ``cpus`` from their
    next job on (``()``: on the process's own CPUs); how many CPUs that is."""
    from dpmpi import _cext

    return int(_cext.lib.dpmpi_snap_helper_cpus(_cext.ffi.new("int[]", list(cpus) or [0]), len(cpus)))


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
