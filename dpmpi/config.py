"""Every ``DPMPI_*`` environment variable, declared once: its type, default, validation and one
line of documentation. The rest of dpmpi reads its settings only through :func:`get` (or
:func:`raw` for a value passed through untouched), so a bad value gives one clear error that
names the variable, wherever it is read. ``docs/configuration.md`` is generated from this table
(``make docs``; a test keeps the two equal).

The C code gets its values from here too (the snapshot engine's settings are passed in by
Python), except in ``libdpmpi_guard.so``, which is preloaded into programs that may not be
Python: it reads ``DPMPI_STATUS``, ``DPMPI_FINALIZE_TIMEOUT``, ``DPMPI_FATAL_DEADLINE`` and
``DPMPI_LATE_FILTER`` itself,
and ``dpmpi-run`` validates them here before it starts the job.

Pure: imports only the standard library (the boot hook imports it before anything else)."""
from __future__ import annotations

import math
import os
import signal
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

_TRUE = ("1", "on", "yes", "true")
_FALSE = ("0", "off", "no", "false")


def _sigrtmin6() -> int:
    return int(getattr(signal, "SIGRTMIN", 34)) + 6


class ConfigError(ValueError):
    """A ``DPMPI_*`` variable holds a value dpmpi cannot use; the message says how to set it."""


@dataclass(frozen=True)
class Var:
    name: str
    kind: str  # "bool", "int", "seconds", "choice", "text"
    default: Any  # the value when unset or empty: a value, a function giving it, or None (decided
    #               where it is read, see doc)
    doc: str
    audience: str = "user"  # "user": set by people; "internal": set by dpmpi for its own processes
    minimum: float | None = None
    maximum: float | None = None
    choices: tuple[str, ...] = ()
    zero_ok: bool = False  # "seconds": 0 is allowed below ``minimum`` (it turns the feature off)

    def parse(self, text: str) -> Any:
        """The value of ``text`` (non-empty), or a ConfigError."""
        value = text.strip()
        if self.kind == "bool":
            low = value.lower()
            if low in _TRUE or low in _FALSE:
                return low in _TRUE
            raise ConfigError(f"{self.name}={text!r}: use 1 or 0 ({self.name}: {self.doc})")
        if self.kind == "choice":
            if value.lower() in self.choices:
                return value.lower()
            raise ConfigError(f"{self.name}={text!r}: use one of {', '.join(self.choices)} ({self.name}: {self.doc})")
        if self.kind == "text":
            return text
        try:
            number: float = int(value) if self.kind == "int" else float(value)
        except ValueError:
            what = "an integer" if self.kind == "int" else "a number of seconds"
            raise ConfigError(f"{self.name}={text!r} is not {what}: {self.hint()}") from None
        if self.kind == "seconds" and not math.isfinite(number):
            raise ConfigError(f"{self.name}={text!r} is not finite: {self.hint()}")
        if self.zero_ok and number == 0:
            return number
        if (self.minimum is not None and number < self.minimum) or (self.maximum is not None and number > self.maximum):
            raise ConfigError(f"{self.name}={text!r} is out of range: {self.hint()}")
        return number

    def range(self) -> str:
        lo, hi = self.minimum, self.maximum
        unit = " s" if self.kind == "seconds" else ""
        if lo is not None and hi is not None:
            rng = f"between {lo:g} and {hi:g}{unit}"
        elif lo is not None:
            rng = f"at least {lo:g}{unit}"
        elif hi is not None:
            rng = f"at most {hi:g}{unit}"
        else:
            rng = "any number" + unit
        return rng + (", or 0 to turn it off" if self.zero_ok else "")

    def hint(self) -> str:
        return f"use {self.range()} ({self.name}: {self.doc})"


VARS: tuple[Var, ...] = (
    # -- spares and repairs --
    Var("DPMPI_SPARES", "int", 0, "spare ranks: the last S processes of the job wait as spares "
        "(dpmpi-run --spares S sets it; dpmpi.init(spares=) overrides)", minimum=0),
    Var("DPMPI_ON_DEPLETED", "choice", "shrink", "what a repair does when spares run out: continue "
        "with fewer ranks, raise SparesDepletedError, or start new processes", choices=("shrink", "abort", "respawn")),
    Var("DPMPI_REPAIR_TIMEOUT", "seconds", 60.0, "a Respawn that has not committed after this long "
        "ends the process (no hang); so does a creation of an intercommunicator still stuck half this long after "
        "a peer's death was noticed, and any call the main thread is still inside 0.6 of this long after it",
        minimum=0.001),
    Var("DPMPI_SPARE_POLL", "seconds", 0.005, "how often an idle spare tests whether it is called in",
        minimum=0.0001, maximum=10),
    Var("DPMPI_PROLOGUE_MAX", "int", 64 << 20, "bytes of results each active rank keeps of the collectives "
        "its program made before its first snapshot and between dpmpi.Runtime runs (bcast, allreduce, "
        "allgather, barrier, gather, reduce; a scatter's whole input on its root, every rank's part; every "
        "rank's result of a "
        "scan, exscan or alltoall; the v-variants and reduce_scatters; on derived communicators too; the "
        "messages it sent, by destination), "
        "which a replacement's own prologue gets from them (docs/spares.md); past it, a replacement that "
        "reaches that point raises ReplayError", minimum=0),
    Var("DPMPI_SETUP_WATCH", "int", 64, "how many of the program's first collectives on the communicator "
        "dpmpi.init() returned (bcast, allreduce, allgather, barrier, scatter, gather, reduce, scan, exscan, "
        "alltoall, either case, the v-variants and reduce_scatters), "
        "before a dpmpi.Runtime or a snapshot exists, are each followed by an agreement, so that a death there "
        "is repaired where it happened (docs/runtime.md, the setup), until a rank makes a call a replacement "
        "cannot redo or registers a repair callback, or a derived communicator is made; past them, or 0, such "
        "a death is the program's ProcFailedError", minimum=0),
    Var("DPMPI_EVENTS", "text", "", "a file: one JSON line per repair and per watcher interruption "
        "(appended by every process)"),
    # -- failure detection --
    Var("DPMPI_WATCH", "bool", True, "the failure watcher thread (0: none; deaths are then noticed "
        "at the next MPI call)"),
    Var("DPMPI_WATCH_PIDFD", "bool", True, "the watcher's pidfds on processes of the same node (0: "
        "ULFM only, e.g. to measure it)"),
    Var("DPMPI_WATCH_TELL", "bool", True, "when a pidfd shows a peer ended, the watcher tells this "
        "process's Open MPI at once (a local PMIx event, the one the runtime sends later), so that a "
        "repair does not wait for the runtime's report (0: wait for it)"),
    Var("DPMPI_LATE_FILTER", "bool", True, "drop the control messages a dead peer sent just before it died "
        "that Open MPI 5.0.11 would otherwise apply to a send or receive it already completed in error "
        "(its defect: a hang or a segfault after a recovery, about 1 job in 30 in a kill loop here; "
        "cext/dpmpi_late.c). Installed only on that Open MPI; 0: never"),
    Var("DPMPI_MPI_EVENT_TICK", "int", 1000, "microseconds between the runs of Open MPI's event loop "
        "inside MPI calls (its mpi_event_tick_rate, default 10000, set by dpmpi-run and by `import "
        "dpmpi` before MPI starts unless already set): reports of a death are handled there, so a rank "
        "inside an MPI call learns of one this much later at most (0: leave Open MPI's default)",
        minimum=0, maximum=1_000_000),
    Var("DPMPI_WATCH_ULFM", "choice", "auto", "the watcher's receive on a dedicated communicator (auto: "
        "when some pair of processes cannot watch each other with pidfds)",
        choices=("auto", "1", "0", "on", "off", "yes", "no", "true", "false")),
    Var("DPMPI_WATCH_POLL", "seconds", 0.01, "how often the watcher tests its ULFM receive",
        minimum=0.0005, maximum=10),
    Var("DPMPI_WATCH_SIGNAL", "int", _sigrtmin6, "the signal the watcher sends to the main thread "
        "(default SIGRTMIN+6)", minimum=1, maximum=64),
    Var("DPMPI_HEARTBEAT_TIMEOUT", "seconds", 10.0, "the hung-rank detector: a rank whose heartbeat "
        "stops this long (e.g. SIGSTOP) is killed by a rank on its node", minimum=1, zero_ok=True),
    Var("DPMPI_STALL_TIMEOUT", "seconds", 0.0, "a C watchdog ends a rank that makes no progress "
        "outside MPI calls for this long, from its first dpmpi call to its end (start-up, an idle "
        "spare's wait and the wait at the end for the other ranks are not a hang); its main "
        "thread's traceback goes to stderr first", minimum=0),
    Var("DPMPI_FINALIZE_TIMEOUT", "seconds", None, "MPI_Finalize runs under this watchdog (default "
        "2 s + 2 ms per process)", minimum=0),
    Var("DPMPI_FATAL_DEADLINE", "int", 5, "a process still inside the MPI library's handler of a fatal "
        "signal (SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT) this many seconds later ends by SIGALRM, so that "
        "the others repair around it (0: no deadline)", minimum=0, maximum=3600),
    Var("DPMPI_REQUIRE_FT", "bool", True, "refuse to run on an MPI without fault tolerance "
        "(0 allows it)"),
    # -- snapshots --
    Var("DPMPI_COPY_THREADS", "int", 1, "C copy threads per Snapshot (Snapshot(threads=) overrides)",
        minimum=1, maximum=64),
    Var("DPMPI_SNAPSHOT_NICE", "int", 19, "the nice value of the snapshot copy threads (0: the program's "
        "priority)", minimum=0, maximum=19),
    Var("DPMPI_HELPER_CPUS", "choice", "auto", "where the snapshot copy and replication threads run: auto "
        "(on the node's CPUs that no process of the job is bound to, if any; else on their rank's CPUs) or "
        "none (always on their rank's CPUs)", choices=("auto", "none")),
    Var("DPMPI_RESTORE_PULL", "bool", True, "a restore copies between two processes of one node by reading "
        "(process_vm_readv on the receiver's copy threads, checksummed as it arrives; 0: MPI messages, as "
        "between nodes)"),
    Var("DPMPI_REPL_STREAM", "choice", "auto", "a commit's replication sends each 4 MiB piece of the copy as soon "
        "as it is written, its header once sealed: 1, 0 (after the whole copy) or auto (1 where the snapshot "
        "threads have CPUs of their own, DPMPI_HELPER_CPUS; sharing the rank's core it cost 3-6 ms per 64 MiB "
        "commit on a 2-core VM)", choices=("auto", "1", "0")),
    Var("DPMPI_HUGE_PAGES", "bool", True, "snapshot slots of 4 MiB or more ask for transparent huge pages "
        "(replication ~1.2-1.4x faster where the kernel's THP mode is 'madvise'); 0: 4 KiB pages"),
    Var("DPMPI_NO_SIMD", "bool", False, "copy and checksum without AVX2 (to compare)"),
    Var("DPMPI_REPL_REPORT", "seconds", 30.0, "a snapshot replication still running after this long says once "
        "on stderr which of its messages it waits for (0: never)", minimum=0.1, zero_ok=True),
    Var("DPMPI_SWAP_MIN", "int", 0, "restore(swap=True) (dpmpi.Runtime) gives host arrays of at least "
        "this many bytes, in private anonymous memory, the snapshot's pages instead of a copy (0, the default: "
        "never; see docs/snapshots.md before turning it on)", minimum=0),
    # -- the GPU path (dpmpi.gpu) --
    Var("DPMPI_GPU_BACKEND", "choice", "cupy", "the GPU path's backend: cupy (NCCL through CuPy) or fake "
        "(host arrays stand in for device arrays, MPI carries the collectives: machines without a GPU)",
        choices=("cupy", "fake")),
    Var("DPMPI_GPU_TIMEOUT", "seconds", 300.0, "an NCCL operation or device copy not completed after this "
        "long counts as failed (no hang)", minimum=0.001),
    Var("DPMPI_GPU_REBUILD_TIMEOUT", "seconds", 30.0, "an NCCL init, warm-up or abort taking longer fails; "
        "an init or abort (which cannot be polled) then ends the process as a failure", minimum=0.001),
    Var("DPMPI_GPU_FAKE_FAULTS", "text", "", "faults of the fake GPU backend, RANK:POINT@COUNT:KIND,... "
        "(collective: HANG or ASYNC_ERROR; abort: HANG)"),
    # -- launching and testing --
    Var("DPMPI_FORM_TIMEOUT", "seconds", 60.0, "dpmpi-run ends and launches again (DPMPI_START_RETRIES) a job "
        "whose formation in dpmpi.init has not completed this long after every rank entered it or died "
        "(a death during start-up left Open MPI stuck there); 0: never", minimum=1.0, zero_ok=True),
    Var("DPMPI_START_RETRIES", "int", 2, "how many times dpmpi-run launches the job again when a process "
        "died before any rank's MPI_Init returned (Open MPI's start-up is not fault tolerant; no rank "
        "ran past MPI_Init, so nothing is repeated but what the program does before it), or when a death "
        "in the program's setup that the job could not repair ended it before any rank committed a "
        "snapshot (nothing lost; the setup runs again); 0: end the job",
        minimum=0, maximum=100),
    Var("DPMPI_MPIRUN", "text", "", "the mpirun that dpmpi-run starts (default: the one beside "
        "Python, else on PATH)"),
    Var("DPMPI_FAULTS", "text", "", "planned faults, RANK:POINT@COUNT:KIND,... (see Fault "
        "injection)"),
    # -- set by dpmpi for its own processes --
    Var("DPMPI_STATUS", "bool", False, "write a status record per rank for dpmpi-run (set by "
        "dpmpi-run)", audience="internal"),
    Var("DPMPI_BOOT", "bool", False, "install the exit guard in every Python rank, even one that "
        "never imports dpmpi (set by dpmpi-run)", audience="internal"),
    Var("DPMPI_REPLACEMENT", "bool", False, "this process replaces a failed one: planned faults do "
        "not strike it again (set by repairs)", audience="internal"),
    Var("DPMPI_SPAWNED", "bool", False, "this process was started by a repair under policy "
        "respawn (set by the repair)", audience="internal"),
    Var("DPMPI_JOB_TAG", "text", "", "the job's identity, the same on all its processes (a random "
        "tag set by dpmpi-run and passed to spawned processes; without it, from the launch's PMIx "
        "namespace): the snapshot files a job writes to persist_dir carry it, so that it never takes "
        "another job's files for its own", audience="internal"),
    Var("DPMPI_RANK_PID", "int", None, "the pid of the process that is the rank, so that its "
        "children record nothing (set by the exit guard)", audience="internal"),
)
_BY_NAME: dict[str, Var] = {v.name: v for v in VARS}


def var(name: str) -> Var:
    try:
        return _BY_NAME[name]
    except KeyError:
        raise KeyError(f"{name} is not a dpmpi setting (dpmpi/config.py declares them all)") from None


def raw(name: str, environ: Mapping[str, str] | None = None) -> str:
    """The variable's text as set ("" when unset); for values passed on untouched."""
    var(name)
    env = os.environ if environ is None else environ
    return env.get(name, "")


def get(name: str, environ: Mapping[str, str] | None = None, default: Any = None) -> Any:
    """The variable's value: parsed and validated (ConfigError otherwise), or its default when
    unset or empty (``default`` replaces a declared default of None)."""
    v = var(name)
    text = raw(name, environ)
    if text.strip() == "":
        if callable(v.default):
            return v.default()
        return v.default if v.default is not None else default
    return v.parse(text)


def is_set(name: str, environ: Mapping[str, str] | None = None) -> bool:
    return raw(name, environ).strip() != ""


def check_all(environ: Mapping[str, str] | None = None) -> None:
    """Validate every variable that is set (dpmpi-run does this before it starts a job): a
    ConfigError for the first bad one."""
    env = os.environ if environ is None else environ
    for v in VARS:
        if env.get(v.name, "").strip():
            v.parse(env[v.name])


def unknown(environ: Mapping[str, str] | None = None) -> list[str]:
    """``DPMPI_*`` names in the environment that dpmpi does not know (a typo, most often)."""
    env = os.environ if environ is None else environ
    return sorted(k for k in env if k.startswith("DPMPI_") and k not in _BY_NAME)


def markdown() -> str:
    """docs/configuration.md: the table of every variable."""
    lines = ["# Configuration", "",
             "Generated from `dpmpi/config.py` by `make docs`. "
             "An unset or empty variable takes its default; a bad value stops the program with an "
             "error that names the variable.", ""]
    for audience, title in (("user", "Settings"), ("internal", "Set by dpmpi for its own processes")):
        lines += [f"## {title}", "", "| variable | type | default | meaning |", "|---|---|---|---|"]
        for v in VARS:
            if v.audience != audience:
                continue
            kind = " / ".join(v.choices) if v.kind == "choice" else v.kind
            if v.kind in ("int", "seconds") and (v.minimum is not None or v.maximum is not None):
                kind += f" ({v.range()})"
            default = "see meaning" if v.default is None or callable(v.default) else ("unset" if v.default == "" else
                                                              ("1" if v.default is True else
                                                               "0" if v.default is False else f"{v.default:g}"
                                                               if isinstance(v.default, float) else str(v.default)))
            lines.append(f"| `{v.name}` | {kind} | {default} | {v.doc} |")
        lines.append("")
    return "\n".join(lines)

