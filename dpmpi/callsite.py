"""Where the program called into dpmpi: its first frame outside dpmpi's modules (for dpmpi's
warnings about the program's calls, which name the program's line). No state."""
from __future__ import annotations

import sys
from typing import Any


def program_level() -> int:
    """warnings.warn's stacklevel, from the caller of warn, that points at the program's line."""
    return 2 + _program_frame(sys._getframe(2))[0]


def program_line() -> str:
    """Where the program called into dpmpi (its first frame outside dpmpi): "file:line"."""
    frame = _program_frame(sys._getframe(1))[1]
    return f"{frame.f_code.co_filename}:{frame.f_lineno}"


def _program_frame(frame: Any) -> tuple[int, Any]:
    """From ``frame`` outwards, the first frame outside dpmpi (the outermost one if none is) and
    how many frames lie before it."""
    level = 0
    while frame.f_back is not None and frame.f_globals.get("__name__", "").startswith("dpmpi."):
        level, frame = level + 1, frame.f_back
    return level, frame
