"""dpmpi's chaos harness: kill ranks of a running job from outside, at random times, with random
signals, and give every run one verdict.

    .venv/bin/python bench/chaos.py --runs 6 --workloads mlp,jacobi,mlp-prim,jacobi-prim --kills 1,2
    .venv/bin/python bench/chaos.py --failure-free 200 --workloads primitives
    .venv/bin/python bench/chaos.py --workloads jacobi --kills 2 --run-seed 1234 --duration 2.5   # replay one run

Each run launches ``dpmpi-run -n N --spares S -- python PROGRAM ARGS --progress`` in its own
session and finds the job's MPI processes from outside: it walks /proc for processes below the
launcher (by parent chain, or in its session) whose environment has ``OMPI_COMM_WORLD_RANK``
(world rank -> pid; processes started by policy "respawn" carry ``DPMPI_SPAWNED=1``). From the
first ``step`` line on stdout it kills 1-3 of them at the planned times (seconds after that
line) with the planned signals: active ranks, idle spares, a spare that has already replaced a
killed rank, and a second victim 0-50 ms after the first (while the first repair runs). A plan
is a pure function of the run's seed, the configuration and the run's estimated duration (the
failure-free run's, or ``--duration``), so ``--run-seed`` with the same ``--duration`` replays
a run exactly: same victims, same times, same signals.

Workloads (``WORKLOADS``): ``mlp`` and ``jacobi`` are the Runtime examples; ``mlp-prim`` and
``jacobi-prim`` run the same models through examples/primitives.py's hand-written loop (init,
Respawn, Snapshot, no Runtime, no close()); ``primitives`` is that program's own 1-D rod. Each
snapshot is held by as many buddies as the run kills (``--replicas``), so that two buddies killed
within milliseconds do not lose the only copy; ``--replicas 1`` shows what one replica survives.

Verdicts (one per run; see ``verdict``): ``hang`` (the hard timeout: the whole session is
killed), ``crash`` (dpmpi-run's exit code is not 0), ``wrong`` (the ranks' final digests are
missing or differ from a failure-free run of the same configuration, run once and cached),
``dirty-exit`` (exit 0 and the right digests, but stderr has an error a victim did not cause:
``OPAL ERROR``, ``Segmentation fault``, ``Address not mapped``, ``MPI_ERRORS_ARE_FATAL``,
``signal``, or dpmpi-run's account names a rank that died or failed and was not a victim),
``ok``; and ``late-kill``: a non-zero exit with every digest right, where every rank dpmpi-run
counts as lost is a victim killed after it printed its final line (its teardown: dpmpi-run has
no record of it and counts it lost). No kill is sent to a victim whose final line the harness
has already seen; ``late-kill`` covers the race of a few milliseconds between that line and the
kill. ``--failure-free N`` runs N jobs with no kills (dirty exits of a clean job).

The seed is printed; the JSON (``--out``, default bench/results/chaos.json) has every run's
plan, kills, exit code, digests, verdict and reasons, and the summary (configuration x verdict).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
BIN = Path(sys.executable).parent  # run it with the venv's python
VERDICTS = ("ok", "wrong", "hang", "crash", "dirty-exit", "late-kill")
SIGNALS = {"KILL": signal.SIGKILL, "TERM": signal.SIGTERM, "SEGV": signal.SIGSEGV, "STOP": signal.SIGSTOP,
           "ABRT": signal.SIGABRT, "INT": signal.SIGINT}

# short runs (~2-3 s of steps on 2 cores at 4 + 1 ranks); --progress is added by the harness
WORKLOADS = {
    "mlp": ("train_mlp.py", ["--steps", "200", "--state-mib", "2", "--batch", "32"]),
    "jacobi": ("jacobi.py", ["--steps", "300", "--state-mib", "1", "--width", "256"]),
    "primitives": ("primitives.py", ["--steps", "200", "--step-ms", "10"]),
    # the two Runtime workloads' models through the primitives program's hand-written loop
    "mlp-prim": ("primitives.py", ["--model", "mlp", "--steps", "200", "--state-mib", "2"]),
    "jacobi-prim": ("primitives.py", ["--model", "jacobi", "--steps", "300", "--state-mib", "1"]),
}

# stderr lines that mean something went wrong in the job (matched case-insensitively)
DIRTY_PATTERNS = ("OPAL ERROR", "Segmentation fault", "Address not mapped", "MPI_ERRORS_ARE_FATAL", "signal")
_DIRTY_RE = re.compile("|".join(re.escape(p) for p in DIRTY_PATTERNS), re.IGNORECASE)
_PID_PREFIX = re.compile(r"^\[[^\]:]*:(\d+)\]")  # Open MPI's "[host:PID] ..." lines
_ACCOUNT_DIED = re.compile(r"rank (\d+) died \(no status: killed by a signal\)")
_ACCOUNT_FAILED = re.compile(r"rank (\d+) failed \(status (-?\d+)")


# ---- pure: the process tree ------------------------------------------------------------------
@dataclass(frozen=True)
class Proc:
    pid: int
    ppid: int
    sid: int
    env: dict = field(default_factory=dict, compare=False, hash=False)


def parse_stat(text: str) -> tuple[int, int, int]:
    """(pid, ppid, session id) from the text of /proc/PID/stat (the command name may hold
    spaces and parentheses: the fields after it follow the last ')')."""
    pid = int(text[: text.index("(")].strip())
    rest = text[text.rindex(")") + 1 :].split()
    # rest: state ppid pgrp session ...
    return pid, int(rest[1]), int(rest[3])


def parse_environ(raw: bytes) -> dict[str, str]:
    """The NUL-separated environment of /proc/PID/environ."""
    env = {}
    for item in raw.split(b"\0"):
        if b"=" in item:
            k, v = item.split(b"=", 1)
            env[k.decode("utf-8", "replace")] = v.decode("utf-8", "replace")
    return env


def below(procs: dict[int, Proc], pid: int, root: int) -> bool:
    """Whether ``pid`` descends from ``root`` (parent chain), or is in its session (a process
    whose parent died is re-parented, but keeps the session that the launcher started)."""
    p = procs.get(pid)
    if p is None:
        return False
    if p.sid == root and pid != root:
        return True
    seen = set()
    while p is not None and p.pid not in seen:
        seen.add(p.pid)
        if p.ppid == root:
            return True
        p = procs.get(p.ppid)
    return False


@dataclass
class Tree:
    world: dict[int, int]  # world rank -> pid (the job's own processes; a spare keeps its pid)
    spawned: dict[int, int]  # pid -> its rank in the spawned job (policy "respawn", DPMPI_SPAWNED=1)
    others: list[int]  # other processes below the launcher (mpirun/prterun, ...)


def parse_proc_tree(procs: dict[int, Proc], root: int) -> Tree:
    """The job's MPI processes below ``root`` (the launcher's pid): the topmost process with
    ``OMPI_COMM_WORLD_RANK`` in its environment on each branch (a child that a rank forks
    inherits the variable: it is not a rank)."""
    world: dict[int, int] = {}
    spawned: dict[int, int] = {}
    others: list[int] = []
    for pid in sorted(procs):
        if not below(procs, pid, root):
            continue
        p = procs[pid]
        rank = p.env.get("OMPI_COMM_WORLD_RANK")
        parent = procs.get(p.ppid)
        if rank is None or not rank.lstrip("-").isdigit():
            others.append(pid)
            continue
        if parent is not None and "OMPI_COMM_WORLD_RANK" in parent.env:
            continue  # forked by a rank
        if p.env.get("DPMPI_SPAWNED") == "1":
            spawned[pid] = int(rank)
        elif int(rank) not in world or pid < world[int(rank)]:
            world[int(rank)] = pid
    return Tree(world, spawned, others)


def read_procs(root: int, proc: str = "/proc", envs: dict[int, dict] | None = None) -> dict[int, Proc]:
    """Every process's (ppid, sid); the environment only of those below ``root``, once per pid
    when ``envs`` (a cache, pid -> environment) is given: reading /proc/PID/environ takes the
    process's memory-map lock, which a rank holds while it mlocks its snapshot memory (seen
    here: a kill came a second late)."""
    procs: dict[int, Proc] = {}
    for name in os.listdir(proc):
        if not name.isdigit():
            continue
        try:
            with open(f"{proc}/{name}/stat") as f:
                pid, ppid, sid = parse_stat(f.read())
        except (OSError, ValueError):
            continue
        procs[pid] = Proc(pid, ppid, sid)
    for pid, p in list(procs.items()):
        if below(procs, pid, root):
            env = envs.get(pid) if envs is not None else None
            if env is None:
                try:
                    with open(f"{proc}/{pid}/environ", "rb") as f:
                        env = parse_environ(f.read())
                except OSError:
                    continue
                # cache a rank's only: before its exec, a forked child shows its parent's environment
                if envs is not None and "OMPI_COMM_WORLD_RANK" in env:
                    envs[pid] = env
            procs[pid] = Proc(pid, p.ppid, p.sid, env)
    if envs is not None:
        for pid in [q for q in envs if q not in procs]:
            del envs[pid]  # gone: its pid may come back as another process
    return procs


# ---- pure: plans -------------------------------------------------------------------------------
@dataclass
class Kill:
    t: float  # seconds after the first step line
    world_rank: int  # the victim (a spare that replaced a rank keeps its world rank)
    target: str  # "active" | "spare" | "replacement"
    logical: int | None  # the logical rank it holds (None: an idle spare)
    signal: str
    close: bool = False  # 0-50 ms after the previous kill


def plan_run(seed: int, kills: int, signals: list[str], n_active: int, n_spares: int, duration: float) -> list[Kill]:
    """The kills of one run: a pure function of its arguments. ``duration``: the expected time
    from the first step line to the end (the failure-free run's). Replacements are simulated as
    dpmpi assigns them (failed logical ranks get the idle spares in world-rank order)."""
    rng = random.Random(seed)
    holder = {r: r for r in range(n_active)}  # logical rank -> world rank holding it
    idle = list(range(n_active, n_active + n_spares))
    replaced: dict[int, float] = {}  # logical rank -> when its (original) holder was killed
    out: list[Kill] = []
    for i in range(kills):
        kinds = ["active"] * 3
        if idle:
            kinds.append("spare")
        # a process that is already a replacement (once its repair is surely done)
        ready = [lg for lg, w in holder.items() if w is not None and w >= n_active and lg in replaced
                 and replaced[lg] + 0.25 * duration <= 0.85 * duration]
        if ready:
            kinds += ["replacement"] * 3
        originals = [lg for lg, w in holder.items() if w is not None and w < n_active]
        if not originals:
            kinds = [k for k in kinds if k != "active"] or ["spare"]
        kind = rng.choice(kinds)
        if kind == "spare" and not idle:
            kind = "active" if originals else "replacement"
        sig = rng.choice(signals)
        prev = out[-1].t if out else None
        close = prev is not None and kind != "replacement" and rng.random() < 0.4
        if close:
            t = prev + rng.uniform(0.0, 0.05)
        elif prev is None:
            t = rng.uniform(0.1, 0.6) * duration
        else:
            t = min(rng.uniform(prev + 0.1 * duration, 0.8 * duration), 0.85 * duration)
            t = max(t, prev)
        if kind == "spare":
            victim = idle.pop(rng.randrange(len(idle)))
            out.append(Kill(round(t, 4), victim, "spare", None, sig, close))
            continue
        if kind == "replacement":
            lg = rng.choice(ready)
            t = max(t, replaced[lg] + 0.25 * duration)  # after its repair and restore
        else:
            lg = rng.choice(originals)
        victim = holder[lg]
        holder[lg] = idle.pop(0) if idle else None  # None: spares ran out (shrink or respawn)
        replaced[lg] = t
        out.append(Kill(round(t, 4), victim, kind, lg, sig, close))
    out.sort(key=lambda k: k.t)
    return out


def run_seed(seed: int, workload: str, kills: int, index: int) -> int:
    """Each run's own seed, from the master seed (so one run can be replayed alone)."""
    return int.from_bytes(hashlib.sha256(f"{seed}:{workload}:{kills}:{index}".encode()).digest()[:4], "big")


# ---- pure: outcomes ----------------------------------------------------------------------------
def events(stdout: str) -> list[dict]:
    out = []
    for line in stdout.splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                out.append(json.loads(line))
            except ValueError:
                pass
    return out


def final_digests(stdout: str, n_active: int, steps: int | None = None) -> dict[int, str] | None:
    """rank -> digest from the ranks' ``final`` lines; None unless every active rank printed
    one (at ``steps`` when given)."""
    got: dict[int, str] = {}
    for e in events(stdout):
        if e.get("event") == "final" and isinstance(e.get("rank"), int):
            if steps is not None and e.get("step") != steps:
                continue
            got[e["rank"]] = str(e.get("digest"))
    if sorted(got) != list(range(n_active)):
        return None
    return got


def job_digest(digests: dict[int, str] | None) -> str | None:
    """One digest for the whole job (the ranks' digests in rank order)."""
    if digests is None:
        return None
    return hashlib.sha256(json.dumps([digests[r] for r in sorted(digests)]).encode()).hexdigest()[:16]


def dirty_reasons(stderr: str, victims: list[dict], n_launched: int) -> list[str]:
    """What in stderr says the job did not end cleanly, leaving out what our victims caused: the
    lines of a victim's own pid (Open MPI's ``[host:PID]`` signal report), dpmpi-run's account
    and dpmpi's fault lines are not matched against the patterns; the account's ranks that died
    by a signal or failed must be victims (spawned victims: any rank >= ``n_launched``)."""
    victim_pids = {v["pid"] for v in victims if v.get("pid")}
    victim_ranks = {v["world_rank"] for v in victims if v.get("world_rank") is not None and not v.get("spawned")}
    any_spawned = any(v.get("spawned") for v in victims)
    reasons: list[str] = []
    pids: dict[str, set[int]] = {}
    for line in stderr.splitlines():
        if line.startswith("dpmpi-run:"):
            for m in _ACCOUNT_DIED.finditer(line):
                r = int(m.group(1))
                if r not in victim_ranks and not (any_spawned and r >= n_launched):
                    reasons.append(f"rank {r} died by a signal and was not a victim")
            for m in _ACCOUNT_FAILED.finditer(line):
                r = int(m.group(1))
                if r not in victim_ranks and not (any_spawned and r >= n_launched):
                    reasons.append(f"rank {r} failed with status {m.group(2)} and was not a victim")
            continue
        if line.startswith("[dpmpi-fault]"):
            continue
        m = _PID_PREFIX.match(line)
        if m and int(m.group(1)) in victim_pids:
            continue
        if _DIRTY_RE.search(line):
            text = line[m.end():].strip() if m else line.strip()
            pids.setdefault(text[:200], set()).add(int(m.group(1)) if m else 0)
    # one line per distinct reason, in order; the same report from several processes once
    out = list(dict.fromkeys(reasons))
    for text, who in pids.items():
        n = len(who - {0}) or 1
        out.append(f"stderr: {text}" + (f" (x{n} processes)" if n > 1 else ""))
    return out


def late_victims(stdout: str, victims: list[dict]) -> set[int]:
    """World ranks of victims killed after they had printed their final line (their work was
    done and reported; the kill hit their teardown)."""
    final_at = {e["wid"]: e["time"] for e in events(stdout)
                if e.get("event") == "final" and isinstance(e.get("wid"), int) and isinstance(e.get("time"), (int, float))}
    return {v["world_rank"] for v in victims
            if not v.get("spawned") and v.get("wall") is not None and final_at.get(v["world_rank"], float("inf")) < v["wall"]}


def accounted_ranks(stderr: str) -> set[int]:
    """The ranks dpmpi-run's account names as died or failed."""
    out: set[int] = set()
    for line in stderr.splitlines():
        if line.startswith("dpmpi-run:"):
            out |= {int(m.group(1)) for m in _ACCOUNT_DIED.finditer(line)}
            out |= {int(m.group(1)) for m in _ACCOUNT_FAILED.finditer(line)}
    return out


def verdict(returncode: int | None, timed_out: bool, digest: str | None, expected: str | None, stderr: str,
            victims: list[dict], n_launched: int = 0, stdout: str = "") -> str:
    """The run's one verdict: hang > crash > wrong > dirty-exit > ok; and ``late-kill``: a
    non-zero exit with every result right, where every rank that dpmpi-run counts as lost is a
    victim killed after it printed its final line (dpmpi-run has no record of a rank killed in
    its teardown, and counts it as lost: a conservative exit code, not a failed recovery)."""
    if timed_out:
        return "hang"
    if returncode != 0:
        late = late_victims(stdout, victims)
        named = accounted_ranks(stderr)
        if late and named and named <= late and digest is not None and digest == expected:
            return "late-kill"
        return "crash"
    if digest is None or expected is None or digest != expected:
        return "wrong"
    if dirty_reasons(stderr, victims, n_launched):
        return "dirty-exit"
    return "ok"


def summary_table(results: list[dict]) -> str:
    rows: dict[str, dict[str, int]] = {}
    for r in results:
        rows.setdefault(r["config"], dict.fromkeys(VERDICTS, 0))[r["verdict"]] += 1
    width = max([len("configuration")] + [len(c) for c in rows])
    head = f"{'configuration':<{width}} " + " ".join(f"{v:>10}" for v in VERDICTS) + f" {'runs':>5}"
    lines = [head, "-" * len(head)]
    for config, counts in rows.items():
        lines.append(f"{config:<{width}} " + " ".join(f"{counts[v]:>10}" for v in VERDICTS)
                     + f" {sum(counts.values()):>5}")
    return "\n".join(lines)


# ---- running jobs --------------------------------------------------------------------------------
@dataclass
class Config:
    workload: str
    kills: int = 1
    signals: list[str] = field(default_factory=lambda: ["KILL"])
    ranks: int = 4  # active ranks
    spares: int | None = None  # default: one per kill
    replicas: int | None = None  # buddies per snapshot (--replicas of the workload); default: one per kill
    env: dict = field(default_factory=dict)
    timeout: float = 60.0
    args: list[str] | None = None  # the workload's arguments (default: WORKLOADS)

    @property
    def n_spares(self) -> int:
        return self.kills if self.spares is None else self.spares

    @property
    def n_replicas(self) -> int:
        return max(1, self.kills) if self.replicas is None else self.replicas

    @property
    def program(self) -> str:
        return str(EXAMPLES / WORKLOADS[self.workload][0])

    @property
    def program_args(self) -> list[str]:
        args = list(WORKLOADS[self.workload][1] if self.args is None else self.args)
        return args if "--replicas" in args else [*args, "--replicas", str(self.n_replicas)]

    @property
    def steps(self) -> int | None:
        a = self.program_args
        return int(a[a.index("--steps") + 1]) if "--steps" in a else None

    @property
    def name(self) -> str:
        sig = "+".join(self.signals)
        return f"{self.workload} {self.ranks}+{self.n_spares} r={self.n_replicas} kills={self.kills} {sig}"

    def key(self) -> str:
        """What a failure-free reference depends on."""
        return json.dumps([self.workload, self.ranks, self.n_spares, self.program_args, sorted(self.env.items())])


@dataclass
class Job:
    returncode: int | None
    timed_out: bool
    stdout: str
    stderr: str
    first_step: float | None  # monotonic time of the first step line
    end: float
    start: float
    kills: list[dict]
    seen: dict  # world rank -> pid, and spawned processes, as found


def _kill_session(root: int, sig: int = signal.SIGKILL) -> None:
    try:
        os.killpg(root, sig)
    except (ProcessLookupError, PermissionError):
        pass
    # anything below the launcher that left its process group
    try:
        procs = read_procs(root)
    except OSError:
        return
    for pid in procs:
        if pid != root and below(procs, pid, root):
            try:
                os.kill(pid, sig)
            except (ProcessLookupError, PermissionError):
                pass


def launch(cfg: Config, plan: list[Kill], log=None) -> Job:
    """Run one job, killing the plan's victims from outside. ``log``: a callable for progress."""
    n = cfg.ranks + cfg.n_spares
    cmd = [str(BIN / "dpmpi-run"), "-n", str(n), "--spares", str(cfg.n_spares), "--",
           str(BIN / "python"), cfg.program, *cfg.program_args, "--progress"]
    env = dict(os.environ)
    env.update({k: str(v) for k, v in cfg.env.items()})
    env.pop("DPMPI_FAULTS", None)  # kills come from outside only
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    out_lines: list[str] = []
    err_lines: list[str] = []
    first_step: list[float] = []
    start = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=str(ROOT), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, errors="replace", start_new_session=True)

    finished: set[int] = set()  # world ranks (job-wide ids) that printed their final line

    def pump_out():
        for line in proc.stdout:
            if not first_step and '"event": "step"' in line:
                first_step.append(time.monotonic())
            if '"event": "final"' in line:
                try:
                    finished.add(int(json.loads(line)["wid"]))
                except (ValueError, KeyError, TypeError):
                    pass
            out_lines.append(line)

    def pump_err():
        for line in proc.stderr:
            err_lines.append(line)

    threads = [threading.Thread(target=pump_out, daemon=True), threading.Thread(target=pump_err, daemon=True)]
    for t in threads:
        t.start()
    deadline = start + cfg.timeout
    pending = list(plan)
    done: list[dict] = []
    seen: dict = {"world": {}, "spawned": {}}
    lock = threading.Lock()
    stop = threading.Event()

    def scan():
        # in its own thread, so that a slow read of /proc (a rank's environment waits for its
        # memory-map lock) never delays a kill; a world rank keeps its pid, so the map stays good
        envs: dict[int, dict] = {}  # pid -> environment, read once
        while not stop.is_set():
            try:
                tree = parse_proc_tree(read_procs(proc.pid, envs=envs), proc.pid)
            except OSError:
                tree = Tree({}, {}, [])
            with lock:
                seen["world"].update(tree.world)
                seen["spawned"] = {**seen["spawned"], **tree.spawned}
                seen["spawned_now"] = dict(tree.spawned)
            stop.wait(0.05)

    scanner = threading.Thread(target=scan, daemon=True)
    scanner.start()
    timed_out = False
    while True:
        if proc.poll() is not None:
            break
        now = time.monotonic()
        if now >= deadline:
            timed_out = True
            _kill_session(proc.pid)
            break
        if pending and first_step:
            due = first_step[0] + pending[0].t
            if time.monotonic() >= due:
                k = pending.pop(0)
                with lock:
                    pid = seen["world"].get(k.world_rank)
                    spawned_now = dict(seen.get("spawned_now", {}))
                spawned = False
                if k.target == "replacement" and k.world_rank >= cfg.ranks + cfg.n_spares and spawned_now:
                    pid, spawned = min(spawned_now), True
                at = time.monotonic() - first_step[0]
                record = {**asdict(k), "pid": pid, "spawned": spawned, "at": round(at, 4),
                          "late_ms": round(1e3 * (at - k.t), 1), "sent": False}
                if k.world_rank in finished and not spawned:
                    # its work is done and printed: a kill now tests no recovery, only the
                    # teardown (dpmpi-run then counts the rank as lost: it has no record)
                    record["error"] = "victim had finished (its final line was out)"
                elif pid is not None:
                    try:
                        os.kill(pid, SIGNALS[k.signal])
                        record["sent"] = True
                        record["wall"] = time.time()  # comparable with the ranks' "time" fields
                    except ProcessLookupError:
                        record["error"] = "already gone"
                else:
                    record["error"] = "not found"
                done.append(record)
                if log:
                    log(f"    kill {k.signal} world rank {k.world_rank} ({k.target}) pid {pid} at +{record['at']:.3f} s"
                        + ("" if record["sent"] else f": {record.get('error')}"))
                continue
            wait = due - time.monotonic()
            time.sleep(max(0.0, min(wait, 0.01)))
        else:
            time.sleep(0.01)
    if not timed_out:
        try:
            proc.wait(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            timed_out = True
            _kill_session(proc.pid)
    end = time.monotonic()
    if timed_out:
        proc.wait()
    for t in threads:
        t.join(timeout=10)
    stop.set()
    scanner.join(timeout=10)
    _kill_session(proc.pid)  # a stopped or stray process left behind
    # the plan's kills that never came (the job ended or hung before)
    for k in pending:
        done.append({**asdict(k), "pid": None, "sent": False, "error": "job ended before"})
    return Job(None if timed_out else proc.returncode, timed_out, "".join(out_lines), "".join(err_lines),
               first_step[0] if first_step else None, end, start, done,
               {"world": dict(seen["world"]), "spawned": dict(seen["spawned"])})


class Harness:
    """Runs configurations, caches their failure-free references, and gives verdicts."""

    def __init__(self, log=print, keep_logs: str | None = None, duration: float | None = None) -> None:
        self.log = log or (lambda *_: None)
        self.keep_logs = keep_logs
        self.duration = duration  # overrides the measured one (exact replays)
        self.references: dict[str, dict] = {}

    def reference(self, cfg: Config) -> dict:
        """A failure-free run of the configuration (cached): its job digest and its duration
        from the first step line to the end. Its digest counts even when the job ended badly
        (e.g. a crash at exit after every rank printed its result); up to 3 tries."""
        key = cfg.key()
        if key in self.references:
            return self.references[key]
        tries = []
        for _ in range(3):
            job = launch(cfg, [])
            digests = final_digests(job.stdout, cfg.ranks, cfg.steps)
            v = verdict(job.returncode, job.timed_out, job_digest(digests), job_digest(digests), job.stderr, [],
                        cfg.ranks + cfg.n_spares)
            tries.append(v)
            if digests is not None and job.first_step is not None:
                break
        else:
            raise RuntimeError(f"{cfg.name}: no failure-free run printed every rank's result ({tries});\n"
                               f"{job.stderr[-3000:]}")
        ref = {"digest": job_digest(digests), "digests": digests, "duration": round(job.end - job.first_step, 3),
               "verdicts": tries}
        self.log(f"  reference {cfg.name}: digest {ref['digest']}, {ref['duration']:.2f} s of steps, "
                 f"verdict(s) {', '.join(tries)}")
        self.references[key] = ref
        return ref

    def run(self, cfg: Config, seed: int, index: int = 0, duration: float | None = None) -> dict:
        """One chaos run with this run seed; the plan is drawn over ``duration`` seconds (default:
        the harness's, else the failure-free run's)."""
        ref = self.reference(cfg)
        duration = duration or self.duration or ref["duration"]
        plan = plan_run(seed, cfg.kills, cfg.signals, cfg.ranks, cfg.n_spares, duration)
        self.log(f"  run {index} seed {seed}: " + ", ".join(
            f"{k.signal} {k.target} w{k.world_rank} @{k.t:.3f}{' close' if k.close else ''}" for k in plan))
        job = launch(cfg, plan, self.log)
        return self._result(cfg, job, ref, seed, index, plan, duration)

    def failure_free(self, cfg: Config, index: int = 0) -> dict:
        ref = self.reference(cfg)
        job = launch(cfg, [])
        return self._result(cfg, job, ref, None, index, [], None)

    def _result(self, cfg, job, ref, seed, index, plan, duration) -> dict:
        n = cfg.ranks + cfg.n_spares
        digests = final_digests(job.stdout, cfg.ranks, cfg.steps)
        victims = [k for k in job.kills if k.get("sent")]
        v = verdict(job.returncode, job.timed_out, job_digest(digests), ref["digest"], job.stderr, victims, n, job.stdout)
        reasons = []
        if v == "hang":
            reasons.append(f"no end in {cfg.timeout} s" + ("" if job.first_step is not None else
                           f", and no step line before that: no kill was sent ({len(job.seen['world'])} of {n} "
                           f"processes seen, {len(job.stdout.splitlines())} stdout lines)"))
        elif v == "late-kill":
            reasons.append(f"exit code {job.returncode}: victim(s) {sorted(late_victims(job.stdout, victims))} "
                           f"killed after their final line")
        elif v == "crash":
            account = [ln for ln in job.stderr.splitlines() if ln.startswith("dpmpi-run:")]
            reasons.append(f"exit code {job.returncode}" + (f": {account[-1]}" if account else ""))
        elif v == "wrong":
            reasons.append("digests missing" if digests is None else f"digests {digests} != {ref['digests']}")
        if v in ("crash", "dirty-exit", "hang", "wrong", "late-kill"):
            reasons += dirty_reasons(job.stderr, victims, n)[:8]
        result = {
            "config": cfg.name, "workload": cfg.workload, "kills_planned": cfg.kills, "ranks": cfg.ranks,
            "spares": cfg.n_spares, "signals": cfg.signals, "env": cfg.env, "index": index, "seed": seed,
            "duration": duration, "plan": [asdict(k) for k in plan], "kills": job.kills,
            "returncode": job.returncode, "timed_out": job.timed_out, "wall_s": round(job.end - job.start, 3),
            "digest": job_digest(digests), "expected": ref["digest"], "verdict": v, "reasons": reasons,
            "processes": {"world": job.seen["world"], "spawned": job.seen["spawned"]},
        }
        if seed is not None:
            result["replay"] = replay_command(cfg, seed, duration)
        if v != "ok" and self.keep_logs:
            os.makedirs(self.keep_logs, exist_ok=True)
            stem = Path(self.keep_logs) / f"{cfg.workload}-k{cfg.kills}-{index}-{seed if seed is not None else 'ff'}-{v}"
            Path(f"{stem}.out").write_text(job.stdout)
            Path(f"{stem}.err").write_text(job.stderr)
            result["log"] = str(stem)
        self.log(f"    -> {v}" + (f" ({'; '.join(reasons[:3])})" if reasons else "") + f" [{result['wall_s']:.1f} s]")
        return result


def replay_command(cfg: Config, seed: int, duration: float) -> str:
    parts = ["bench/chaos.py", "--workloads", cfg.workload, "--kills", str(cfg.kills), "--signals",
             ",".join(cfg.signals), "--ranks", str(cfg.ranks), "--spares", str(cfg.n_spares),
             "--replicas", str(cfg.n_replicas),
             "--run-seed", str(seed), "--duration", str(duration), "--timeout", str(cfg.timeout)]
    parts += [f"--env {k}={v}" for k, v in sorted(cfg.env.items())]
    return " ".join(parts)


# ---- command line --------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=4, help="chaos runs per configuration (default 4)")
    ap.add_argument("--workloads", default="mlp,jacobi,mlp-prim,jacobi-prim",
                    help=f"from {', '.join(WORKLOADS)} (default: the two Runtime examples and their models "
                         "through the primitives program)")
    ap.add_argument("--kills", default="1,2", help="kills per run; one configuration each (default 1,2)")
    ap.add_argument("--signals", default="KILL", help=f"signals to choose from ({','.join(SIGNALS)})")
    ap.add_argument("--ranks", type=int, default=4, help="active ranks (default 4)")
    ap.add_argument("--spares", type=int, default=None, help="spares (default: as many as kills)")
    ap.add_argument("--replicas", type=int, default=None,
                    help="buddies holding each snapshot (default: as many as kills, so that buddies killed "
                         "close together lose nothing; 1 shows what a single replica survives)")
    ap.add_argument("--timeout", type=float, default=60.0, help="hard timeout per job, s (default 60)")
    ap.add_argument("--seed", type=int, default=None, help="master seed (default random; printed)")
    ap.add_argument("--run-seed", type=int, default=None, help="replay one run: this run seed, once per configuration")
    ap.add_argument("--duration", type=float, default=None,
                    help="the duration the plans are drawn over, s (default: each failure-free run's; give it to replay)")
    ap.add_argument("--failure-free", type=int, default=0, metavar="N",
                    help="instead: N failure-free runs per workload (verdicts: dirty exits of clean jobs)")
    ap.add_argument("--env", action="append", default=[], metavar="KEY=VALUE",
                    help="extra environment for the job (e.g. DPMPI_ON_DEPLETED=respawn, DPMPI_HEARTBEAT_TIMEOUT=2)")
    ap.add_argument("--args", default=None, help="the workload's arguments instead of the default (one string)")
    ap.add_argument("--keep-logs", default=None, metavar="DIR", help="save stdout/stderr of non-ok runs here")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "chaos.json"))
    a = ap.parse_args(argv)
    workloads = [w for w in a.workloads.split(",") if w]
    for w in workloads:
        if w not in WORKLOADS:
            ap.error(f"unknown workload {w!r} (known: {', '.join(WORKLOADS)})")
    signals = [s.upper().removeprefix("SIG") for s in a.signals.split(",") if s]
    for s in signals:
        if s not in SIGNALS:
            ap.error(f"unknown signal {s!r} (known: {', '.join(SIGNALS)})")
    kills = [int(k) for k in a.kills.split(",") if k]
    env = {}
    for item in a.env:
        if "=" not in item:
            ap.error(f"--env takes KEY=VALUE, got {item!r}")
        k, v = item.split("=", 1)
        env[k] = v
    extra = a.args.split() if a.args else None
    seed = a.seed if a.seed is not None else random.SystemRandom().randrange(1 << 31)
    print(f"chaos: seed {seed}" + (f", run seed {a.run_seed}" if a.run_seed is not None else ""), flush=True)
    h = Harness(log=lambda s: print(s, flush=True), keep_logs=a.keep_logs, duration=a.duration)
    results = []
    try:
        if a.failure_free:
            for w in workloads:
                cfg = Config(w, kills=0, signals=[], ranks=a.ranks, spares=a.spares if a.spares is not None else 1,
                             replicas=a.replicas, env=env, timeout=a.timeout, args=extra)
                print(f"== {cfg.name}: {a.failure_free} failure-free runs", flush=True)
                for i in range(a.failure_free):
                    results.append(h.failure_free(cfg, i))
        else:
            for w in workloads:
                for k in kills:
                    cfg = Config(w, kills=k, signals=signals, ranks=a.ranks, spares=a.spares, replicas=a.replicas, env=env,
                                 timeout=a.timeout, args=extra)
                    print(f"== {cfg.name}", flush=True)
                    if a.run_seed is not None:
                        results.append(h.run(cfg, a.run_seed, 0))
                        continue
                    for i in range(a.runs):
                        results.append(h.run(cfg, run_seed(seed, w, k, i), i))
    except KeyboardInterrupt:
        print("interrupted: writing what ran", flush=True)
    table = summary_table(results)
    print()
    print(table)
    bad = [r for r in results if r["verdict"] != "ok"]
    for r in bad:
        print(f"{r['verdict']}: {r['config']} #{r['index']}: {'; '.join(r['reasons'][:2])}"
              + (f"\n    replay: {r['replay']}" if r.get("replay") else ""))
    summary: dict[str, dict[str, int]] = {}
    for r in results:
        summary.setdefault(r["config"], dict.fromkeys(VERDICTS, 0))[r["verdict"]] += 1
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    with open(a.out, "w") as f:
        json.dump({"seed": seed, "run_seed": a.run_seed, "argv": sys.argv[1:] if argv is None else argv,
                   "time": time.time(), "summary": summary, "references": h.references, "runs": results}, f, indent=1)
    print(f"wrote {a.out}")
    return 0 if not bad else 1


if __name__ == "__main__":
    sys.exit(main())
