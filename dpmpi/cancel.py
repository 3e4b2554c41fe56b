"""dpmpi-run's side of a job cancelled from outside.

SIGTERM or SIGHUP sent to dpmpi-run (a batch scheduler, ``timeout``, ``kill``) used to end
dpmpi-run alone, leaving mpirun and every rank running, orphaned; a SIGINT sent to dpmpi-run alone
was ignored (dpmpi-run expected mpirun to get the terminal's Ctrl-C too) and the job ran to its
end. Now dpmpi-run passes SIGTERM on to mpirun at once (mpirun ends every process of the job), and
after a SIGINT gives mpirun ``INT_GRACE`` seconds to end by itself (it got the terminal's Ctrl-C
too) before it does the same; then it exits 128 + the signal's number, saying so. An mpirun
still running ``KILL_GRACE`` seconds after that SIGTERM is SIGKILLed: seen (forty-second session,
1 run of ~300 of the strangers' loop), prterun stuck on a mutex in PRRTE's event loop after
every rank had ended (a zombie child it never reaped), the SIGTERM never handled, and dpmpi-run
waited for it for ever under ``timeout 120``.

Owner: dpmpi-run's main thread (signal handlers run there; ``launch`` calls the rest)."""
from __future__ import annotations

import signal
import subprocess
import time

INT_GRACE = 2.0  # seconds mpirun has to end by itself after a SIGINT
KILL_GRACE = 10.0  # seconds mpirun has to end after the SIGTERM passed on, before its SIGKILL


class Cancel:
    def __init__(self) -> None:
        self.signum: int | None = None  # the first cancelling signal (None: not cancelled)
        self._proc: subprocess.Popen | None = None
        self._interrupted_at = 0.0
        self._passed_on = False
        self._passed_at = 0.0  # when the SIGTERM was passed on (0: not yet)

    def install(self) -> None:
        """Handle SIGTERM and SIGHUP (main thread only; SIGINT arrives as KeyboardInterrupt)."""
        for signum in (signal.SIGTERM, signal.SIGHUP):
            signal.signal(signum, self._on_signal)

    def watch(self, proc: subprocess.Popen) -> None:
        """The mpirun of this launch (ended at once if a cancel came before it started)."""
        self._proc, self._passed_on, self._passed_at = proc, False, 0.0
        if self.signum is not None and self.signum != signal.SIGINT:
            self._pass_on()

    def interrupted(self) -> None:
        """A SIGINT (KeyboardInterrupt in the main thread)."""
        if self.signum is None:
            self.signum = signal.SIGINT
        if not self._interrupted_at:
            self._interrupted_at = time.monotonic()

    def tick(self) -> None:
        """Called while waiting for mpirun: after a SIGINT, end it once its grace is over; an
        mpirun that a SIGTERM passed on did not end within ``KILL_GRACE``, kill."""
        if self._interrupted_at and time.monotonic() - self._interrupted_at > INT_GRACE:
            self._pass_on()
        overdue = self._passed_at and time.monotonic() - self._passed_at > KILL_GRACE
        if overdue and self._proc is not None and self._proc.poll() is None:
            try:
                self._proc.kill()
            except OSError:
                pass

    def exit_code(self) -> int:
        assert self.signum is not None
        return 128 + int(self.signum)

    def account(self) -> str:
        assert self.signum is not None
        return f"the job was cancelled ({signal.Signals(self.signum).name} to dpmpi-run): mpirun ended its processes"

    def _on_signal(self, signum: int, frame: object) -> None:
        if self.signum is None or self.signum == signal.SIGINT:
            self.signum = signum
        self._pass_on()

    def _pass_on(self) -> None:
        if self._passed_on or self._proc is None or self._proc.poll() is not None:
            return
        self._passed_on, self._passed_at = True, time.monotonic()
        try:
            self._proc.terminate()
        except OSError:
            pass
