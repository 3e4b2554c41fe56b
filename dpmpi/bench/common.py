"""What every ``dpmpi-bench`` subcommand shares: how jobs are launched (dpmpi-run, or plain mpirun
for the relaunch baseline, with the user's hostfile, --map-by and extra mpirun arguments), one job
run with a hard timeout, the progress line, where the bench's programs are, small statistics, and
the JSON files. Pure helpers except ``run_job`` and ``Progress.step`` (stderr)."""
from __future__ import annotations

import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

PY = sys.executable
BIN = Path(PY).parent


class BenchError(Exception):
    """Bad input or a missing piece: the message says what to do."""


# ---- launching ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Launcher:
    """The user's placement, given to every job: ``--hostfile``, ``--map-by`` and any other
    mpirun arguments (after ``--`` on dpmpi-bench's command line)."""
    hostfile: str | None = None
    map_by: str | None = None
    extra: tuple[str, ...] = ()

    def mpirun_options(self) -> list[str]:
        out: list[str] = []
        if self.hostfile:
            out += ["--hostfile", self.hostfile]
        if self.map_by:
            out += ["--map-by", self.map_by]
        return out + list(self.extra)

    def placed(self) -> bool:
        """Whether the user chose the placement (then nothing of ours is added)."""
        return bool(self.hostfile or self.map_by or any(a.startswith(("--host", "-H", "--map-by", "--oversubscribe"))
                                                        for a in self.extra))

    def dpmpi_run(self, n: int, spares: int, program: list[str]) -> list[str]:
        """dpmpi-run -n N --spares S [placement] -- PROGRAM (dpmpi-run adds --with-ft ulfm). The
        installed script (not ``python -m``, which would import a source tree in the working
        directory); ``python -m dpmpi.run`` where there is no script beside this Python."""
        script = BIN / "dpmpi-run"
        head = [str(script)] if script.exists() else [PY, "-m", "dpmpi.run"]
        return [*head, "-n", str(n), "--spares", str(spares), *self.mpirun_options(), "--", *program]

    def mpirun(self, n: int, program: list[str]) -> list[str]:
        """Plain mpirun (no fault tolerance): the relaunch baseline, as users run jobs today."""
        from dpmpi.run import find_mpirun  # the same mpirun as dpmpi-run's (DPMPI_MPIRUN, beside Python, PATH)

        mpirun = find_mpirun()
        own = [] if self.placed() else ["--oversubscribe"]
        root = ["--allow-run-as-root"] if os.geteuid() == 0 else []
        return [mpirun, "--mca", "btl", "^ofi", *own, *root, *self.mpirun_options(), "-n", str(n), *program]


def run_job(cmd: list[str], env: dict[str, str], cwd: str, timeout: float) -> tuple[int, str, str] | None:
    """(exit code, stdout, stderr), or None if the job hung (then its whole session is killed)."""
    proc = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            errors="replace", start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        return None
    return proc.returncode, out, err


ERROR_CHARS = 16_000  # of a failed job's stderr kept in the JSON: enough for a whole backtrace


def error_tail(stderr: str) -> str:
    """What a bench keeps of a failed job's stderr."""
    return stderr[-ERROR_CHARS:]


def json_lines(text: str) -> list[dict]:
    """The JSON objects among a job's output lines (lines that two ranks wrote together, which
    the launcher's forwarding sometimes joins, are skipped)."""
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                out.append(json.loads(line))
            except ValueError:
                pass
    return out


def fault_records(stderr: str) -> list[dict]:
    """dpmpi.faults' records (``[dpmpi-fault] {...}``: a victim's time just before it dies)."""
    return [json.loads(x.split(" ", 1)[1]) for x in stderr.splitlines() if x.startswith("[dpmpi-fault]")]


# ---- where things are -----------------------------------------------------------------------------
NEEDED = ("examples/workloads.py", "tests/programs/hotswap.py")


def source_root(given: str | None = None, start: str | None = None) -> Path:
    """The dpmpi checkout whose examples/ and tests/programs/ the benches run (they are not part
    of the installed package): ``given`` (--source), else the current directory or a parent."""
    if given:
        root = Path(given).resolve()
        if not all((root / n).is_file() for n in NEEDED):
            raise BenchError(f"--source {given}: not a dpmpi checkout (no {' or '.join(NEEDED)})")
        return root
    here = Path(start or os.getcwd()).resolve()
    for d in (here, *here.parents):
        if all((d / n).is_file() for n in NEEDED):
            return d
    raise BenchError("run dpmpi-bench inside a dpmpi checkout (it runs examples/ and tests/programs/), "
                     "or give --source DIR")


# ---- progress -------------------------------------------------------------------------------------
def _clock(s: float) -> str:
    s = int(s)
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"


@dataclass
class Progress:
    """One line on stderr per finished job: ``[label k/N, elapsed, ~left] what``. The estimate
    is the mean job time so far times the jobs left."""
    label: str
    total: int
    stream: object = field(default=sys.stderr, repr=False)
    done: int = 0
    t0: float = field(default_factory=time.monotonic)

    def line(self, what: str, now: float | None = None) -> str:
        el = (now if now is not None else time.monotonic()) - self.t0
        left = el / self.done * (self.total - self.done) if self.done else None
        eta = f", ~{_clock(left)} left" if left is not None and self.done < self.total else ""
        return f"[{self.label} {self.done}/{self.total}, {_clock(el)}{eta}] {what}"

    def step(self, what: str) -> None:
        self.done = min(self.done + 1, self.total)
        print(self.line(what), file=self.stream, flush=True)

    def note(self, what: str) -> None:
        print(f"[{self.label}] {what}", file=self.stream, flush=True)


# ---- numbers and files ----------------------------------------------------------------------------
def med(xs) -> float | None:
    xs = [x for x in xs if x is not None]
    return round(statistics.median(xs), 2) if xs else None


def mx(xs) -> float | None:
    xs = [x for x in xs if x is not None]
    return round(max(xs), 2) if xs else None


def stats(values) -> dict:
    values = [v for v in values if v is not None]
    if not values:
        return {}
    return {"median": round(statistics.median(values), 2), "max": round(max(values), 2), "n": len(values)}


def machine(launcher: Launcher, ranks: int | None = None) -> dict:
    """Where the figures come from; ``oversubscribed`` when the processes outnumber the cores."""
    cpus = os.cpu_count() or 1
    out = {"cpus": cpus, "platform": platform.platform(), "python": platform.python_version(),
           "host": platform.node(), "loadavg": [round(x, 2) for x in os.getloadavg()],
           "launcher": launcher.mpirun_options()}
    if ranks is not None and not launcher.placed():
        out["oversubscribed"] = ranks > cpus
    return out


def write_json(out_dir: Path, name: str, obj: dict) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{name}.json"
    path.write_text(json.dumps(obj, indent=1))
    return path


def parse_list(text: str, kind=int, what: str = "value") -> list:
    """'4,8,16' -> [4, 8, 16]; a clear error otherwise."""
    try:
        out = [kind(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise BenchError(f"{what}: a comma-separated list of numbers, got {text!r}") from None
    if not out:
        raise BenchError(f"{what}: empty list")
    return out


@dataclass
class Context:
    """One dpmpi-bench run: where results go, the checkout whose programs run, the placement,
    whether it is a --quick run, and a scratch directory (the jobs' working directory)."""
    out: Path
    root: Path
    launcher: Launcher
    quick: bool
    tmp: str

    def env(self, **extra: str) -> dict[str, str]:
        """The jobs' environment: this one, the venv's tools first on PATH, plus ``extra``."""
        env = dict(os.environ)
        env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
        env.pop("DPMPI_FAULTS", None)
        env.update(extra)
        return env
