"""dpmpi-run's side of the signals that mpirun forwards to the ranks.

Open MPI's mpirun (PRRTE) forwards SIGUSR1, SIGUSR2, SIGALRM and SIGABRT to every process of
the job; batch systems send such signals as a warning before a time limit or a preemption
(Slurm's ``--signal=B:USR1@120`` signals the batch script's processes). Sent to dpmpi-run, each
ended dpmpi-run alone by its default action (fiftieth session): mpirun and the ranks ran on,
orphaned, the ranks never got the signal, and the job's exit code and account were lost. Now
dpmpi-run passes each on to mpirun, which forwards it to every rank, spares included.

A launch that got one is not launched again (its ranks may have ended by it, as a program
without a handler of its own does), and a failed job's account names what was passed on.

Owner: dpmpi-run's main thread (signal handlers run there; ``launch`` calls the rest)."""
from __future__ import annotations

import signal
import subprocess

SIGNALS = (signal.SIGUSR1, signal.SIGUSR2, signal.SIGALRM, signal.SIGABRT)


class PassOn:
    def __init__(self) -> None:
        self._proc: subprocess.Popen | None = None
        self.passed: list[str] = []  # the signals passed on to this launch's mpirun, in order
        self.dropped: list[str] = []  # those that came while no mpirun was running

    def install(self) -> None:
        for signum in SIGNALS:
            signal.signal(signum, self._on_signal)

    def watch(self, proc: subprocess.Popen) -> None:
        """The mpirun of this launch."""
        self._proc, self.passed = proc, []

    def note(self) -> str:
        """What the account of a failed job adds ('' when nothing was passed on)."""
        said = []
        if self.passed:
            said.append(f"dpmpi-run passed {', '.join(self.passed)} on to every rank")
        if self.dropped:
            said.append(f"{', '.join(self.dropped)} came while no mpirun was running and was not passed on")
        return f" ({'; '.join(said)})" if said else ""

    def _on_signal(self, signum: int, frame: object) -> None:
        name = signal.Signals(signum).name
        if self._proc is None or self._proc.poll() is not None:
            self.dropped.append(name)
            return
        try:
            self._proc.send_signal(signum)
            self.passed.append(name)
        except OSError:
            self.dropped.append(name)
