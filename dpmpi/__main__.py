"""``python -m dpmpi ...`` is the launcher, the same as ``dpmpi-run``."""
import sys

from dpmpi.run import main

sys.exit(main())
