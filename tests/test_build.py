"""The build: the compiled module matches the package, every source file is installed, and the
exit guard keeps a one-process program's exit status (no peers to tell)."""
import pathlib
import subprocess
import sys

import dpmpi
from dpmpi import _cext

SOURCE = pathlib.Path(__file__).resolve().parent.parent / "dpmpi"


def test_c_module_version_matches_package():
    assert _cext.ffi.string(_cext.lib.dpmpi_c_version()).decode() == dpmpi.__version__


def test_every_source_file_is_installed():
    installed = pathlib.Path(dpmpi.__file__).parent
    assert installed != SOURCE, "tests must run against the installed package"
    wanted = {p.relative_to(SOURCE) for p in SOURCE.rglob("*") if p.is_file() and "__pycache__" not in p.parts}
    missing = [str(p) for p in wanted if not (installed / p).exists()]
    assert not missing, f"not installed (add them to meson.build): {missing}"


def singleton(code):
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd="/", timeout=60)


def test_import_does_not_initialise_mpi_and_takes_over_finalize():
    p = singleton("import sys, dpmpi, mpi4py; print('mpi4py.MPI' in sys.modules, mpi4py.rc.finalize)")
    assert p.stdout.split() == ["False", "False"], p.stderr


def test_singleton_keeps_exit_status_and_works():
    p = singleton("import dpmpi; c = dpmpi.COMM_WORLD; print(c.Get_size(), c.allreduce(5)); raise SystemExit(4)")
    assert p.returncode == 4, p.stderr
    assert p.stdout.split() == ["1", "5"]
    p = singleton("import dpmpi, os; from mpi4py import MPI; MPI.COMM_WORLD.Barrier(); os._exit(6)")
    assert p.returncode == 6, p.stderr
    p = singleton("import dpmpi; from mpi4py import MPI; MPI.COMM_WORLD.Barrier(); print('ok')")
    assert (p.returncode, p.stdout.strip()) == (0, "ok"), p.stderr


def test_uncaught_exception_still_prints_its_traceback():
    p = singleton("import dpmpi\nraise KeyError('lost')")
    assert p.returncode == 1
    assert "KeyError: 'lost'" in p.stderr
