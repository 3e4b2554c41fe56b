"""One rank of mpi4py's own test suite (tests/peer/mpi4py/test, unmodified), as run by
bench/peer_mpi4py.py under plain mpirun and under dpmpi-run alike.

    python bench/_peer_rank.py OUTDIR [mpi4py test/main.py options...]

It runs mpi4py's test runner (test/main.py's TestProgram: discovery, -i/-e/-x/--xfile, skipMPI)
and only replaces the unittest runner, so that each rank writes its own files instead of
interleaving its output with the others' on stderr:

* OUTDIR/rank-R.log: unittest's verbose text output of rank R;
* OUTDIR/rank-R.jsonl: one JSON line per test as it ends ({"id", "outcome", "s"}), written and
  flushed at once, so a job killed for hanging still says what ran, and a "start" line before
  each test, so the test it hung in is known;
* OUTDIR/rank-R.json: the summary at the end (run, failures, errors, skipped, ...).
"""
import json
import os
import sys
import time
import unittest
from pathlib import Path

TESTDIR = Path(__file__).resolve().parent.parent / "tests" / "peer" / "mpi4py" / "test"
# At import, not only in main(): mpi4py.futures workers (test_util_pool) run this file as their
# main module (not as "__main__") and then unpickle functions of the test modules, which they
# find where test/main.py's directory would have put them.
sys.path.insert(0, str(TESTDIR))


class _Result(unittest.TextTestResult):
    events = None  # the open .jsonl file

    def _event(self, test, outcome, **extra):
        rec = {"id": _name(test), "outcome": outcome, **extra}
        self.events.write(json.dumps(rec) + "\n")
        self.events.flush()

    def startTest(self, test):
        self._t0 = time.monotonic()
        self._event(test, "start")
        super().startTest(test)

    def _took(self):
        return round(time.monotonic() - getattr(self, "_t0", time.monotonic()), 4)

    def addSuccess(self, test):
        super().addSuccess(test)
        self._event(test, "ok", s=self._took())

    def addFailure(self, test, err):
        super().addFailure(test, err)
        self._event(test, "failure", s=self._took(), detail=self.failures[-1][1][-2000:])

    def addError(self, test, err):
        super().addError(test, err)  # also setUpClass/tearDownClass errors (an _ErrorHolder)
        self._event(test, "error", s=self._took(), detail=self.errors[-1][1][-2000:])

    def addSkip(self, test, reason):
        super().addSkip(test, reason)
        self._event(test, "skip", s=self._took(), reason=str(reason)[:200])

    def addExpectedFailure(self, test, err):
        super().addExpectedFailure(test, err)
        self._event(test, "expected-failure", s=self._took())

    def addUnexpectedSuccess(self, test):
        super().addUnexpectedSuccess(test)
        self._event(test, "unexpected-success", s=self._took())

    def addSubTest(self, test, subtest, err):
        super().addSubTest(test, subtest, err)
        if err is not None:
            failed = issubclass(err[0], test.failureException)
            last = (self.failures if failed else self.errors)[-1][1]
            self._event(subtest, "failure" if failed else "error", detail=last[-2000:])


def _name(test):
    return test.id() if hasattr(test, "id") else str(test)


def make_runner(outdir: Path):
    class Runner(unittest.TextTestRunner):
        resultclass = _Result

        def __init__(self, **kwargs):
            from mpi4py import MPI  # main.py's createTests has initialised MPI by now

            self.rank = MPI.COMM_WORLD.Get_rank()
            self.size = MPI.COMM_WORLD.Get_size()
            self.log = open(outdir / f"rank-{self.rank}.log", "w", buffering=1)
            kwargs["stream"] = self.log
            kwargs["verbosity"] = 2
            super().__init__(**kwargs)

        def _makeResult(self):
            result = super()._makeResult()
            result.events = open(outdir / f"rank-{self.rank}.jsonl", "w", buffering=1)
            return result

        def run(self, test):
            t0 = time.monotonic()
            result = super().run(test)
            summary = {
                "rank": self.rank,
                "size": self.size,
                "run": result.testsRun,
                "failures": len(result.failures),
                "errors": len(result.errors),
                "skipped": len(result.skipped),
                "expected_failures": len(result.expectedFailures),
                "unexpected_successes": len(result.unexpectedSuccesses),
                "failed": sorted({_name(t) for t, _ in result.failures}),
                "errored": sorted({_name(t) for t, _ in result.errors}),
                "wall_s": round(time.monotonic() - t0, 3),
            }
            (outdir / f"rank-{self.rank}.json").write_text(json.dumps(summary, indent=1) + "\n")
            result.events.close()
            self.log.flush()
            return result

    return Runner


def main() -> None:
    outdir = Path(sys.argv[1])
    outdir.mkdir(parents=True, exist_ok=True)
    sys.dont_write_bytecode = True  # as test/runtests.py does; also keeps the vendored tree clean
    import main as mpi4py_main  # mpi4py's test/main.py

    os.chdir(outdir)  # tests that write files (test_io, test_file) do it in the job's directory
    mpi4py_main.TestProgram(module=None, argv=["main.py", *sys.argv[2:]], testRunner=make_runner(outdir))


if __name__ == "__main__":
    main()
