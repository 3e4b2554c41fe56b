"""The chaos harness's pure logic (no processes started): the job's process tree read from /proc,
kill plans drawn from a seed, the ranks' digests, and each run's verdict. ``dpmpi-bench chaos``
(dpmpi/bench/chaos.py) runs the jobs; its docstring says what the verdicts mean."""
from __future__ import annotations

import hashlib
import json
import os
import random
import re
import signal
from dataclasses import dataclass, field

from dpmpi.bench.common import json_lines

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
# (the Finalize watchdog's line: a process that MPI_Finalize left hanging, ended after a timeout)
DIRTY_PATTERNS = ("OPAL ERROR", "Segmentation fault", "Address not mapped", "MPI_ERRORS_ARE_FATAL", "signal",
                  "MPI_Finalize did not return in time")
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
events = json_lines  # the ranks' JSON lines of a job's output


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
                if e.get("event") == "final" and isinstance(e.get("wid"), int)
                and isinstance(e.get("time"), (int, float))}
    return {v["world_rank"] for v in victims
            if not v.get("spawned") and v.get("wall") is not None
            and final_at.get(v["world_rank"], float("inf")) < v["wall"]}


def ended_victims(stdout: str, victims: list[dict], expected: dict[int, str] | None) -> set[int]:
    """World ranks of victims killed, their final line not printed, after every rank that printed
    one had printed it, each with the failure-free run's digest for its rank (``expected``): the
    others had left the program, so no rank was left in it to repair around them (a program with
    no collective after its last one, like examples/primitives.py after a restore, cannot see a
    death there; its results are incomplete). Empty unless such victims account for every rank
    whose final line is missing."""
    if not expected:
        return set()
    finals = [e for e in events(stdout) if e.get("event") == "final" and isinstance(e.get("rank"), int)
              and isinstance(e.get("time"), (int, float))]
    if not finals or any(expected.get(e["rank"]) != str(e.get("digest")) for e in finals):
        return set()
    missing = set(expected) - {e["rank"] for e in finals}
    last = max(e["time"] for e in finals)
    done = {e.get("wid") for e in finals}
    out = {v["world_rank"] for v in victims
           if not v.get("spawned") and v.get("wall") is not None and v["wall"] > last and v["world_rank"] not in done}
    return out if missing and len(out) >= len(missing) else set()


def accounted_ranks(stderr: str) -> set[int]:
    """The ranks dpmpi-run's account names as died or failed."""
    out: set[int] = set()
    for line in stderr.splitlines():
        if line.startswith("dpmpi-run:"):
            out |= {int(m.group(1)) for m in _ACCOUNT_DIED.finditer(line)}
            out |= {int(m.group(1)) for m in _ACCOUNT_FAILED.finditer(line)}
    return out


def verdict(returncode: int | None, timed_out: bool, digest: str | None, expected: str | None, stderr: str,
            victims: list[dict], n_launched: int = 0, stdout: str = "",
            expected_ranks: dict[int, str] | None = None) -> str:
    """The run's one verdict: hang > crash > wrong > dirty-exit > ok; and ``late-kill``: a
    non-zero exit where every rank that dpmpi-run counts as lost is a victim killed in the job's
    teardown: after it printed its final line, every result right (dpmpi-run has no record of a
    rank killed in its teardown, and counts it as lost: a conservative exit code, not a failed
    recovery); or, its final line never printed, after every other rank had printed its own,
    right for its rank (``expected_ranks``; ``ended_victims``)."""
    if timed_out:
        return "hang"
    if returncode != 0:
        late = late_victims(stdout, victims)
        named = accounted_ranks(stderr)
        if late and named and named <= late and digest is not None and digest == expected:
            return "late-kill"
        ended = ended_victims(stdout, victims, expected_ranks)
        if ended and named and named <= late | ended:
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

