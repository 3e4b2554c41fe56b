"""Put on PYTHONPATH by dpmpi-run so that every Python rank gets dpmpi's exit guard and fault
plan, even a plain mpi4py program that never imports dpmpi. Chains to any other
``sitecustomize`` further on the path."""
import importlib
import os
import sys

if os.environ.get("DPMPI_BOOT") == "1":
    try:
        import dpmpi  # noqa: F401  (installs the guard; does not initialise MPI)
    except Exception as exc:  # never stop the user's program from starting
        sys.stderr.write(f"dpmpi-run: could not install dpmpi's exit guard in this rank: {exc}\n")
        if isinstance(exc, ValueError):  # e.g. a bad DPMPI_FAULTS: the run is not what was asked
            raise SystemExit(2) from None

_here = os.path.dirname(os.path.abspath(__file__))
_self = sys.modules.pop("sitecustomize", None)
_saved = sys.path[:]
try:
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _here]
    importlib.import_module("sitecustomize")
except ImportError:
    if _self is not None:
        sys.modules["sitecustomize"] = _self
finally:
    sys.path[:] = _saved
