"""python -m dpmpi.bench: the same as dpmpi-bench."""
import sys

from dpmpi.bench.cli import main

sys.exit(main())
