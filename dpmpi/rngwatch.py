"""Global random generators that a ``dpmpi.Runtime``'s steps draw from without having given them
as state: numpy's legacy global generator (``numpy.random.rand``, ``numpy.random.seed``, ...) and
the ``random`` module's functions. Their state lives in the process; a recovery does not restore
it, so a recovered run draws other numbers than a failure-free one and ends with other results,
silently (a stranger's program seeded ``numpy.random`` once and drew a batch in every step).
Either can be given as state (``{"w": w, "rng": numpy.random.mtrand._rand}``, or
``random._inst``; dpmpi.snapshot.generators keeps their state), or each step can seed it from
its step number.

``GlobalDraws`` looks at the end of a process's first ``CHECKED`` updates whether a global
generator that is not in the state moved since the update before, and warns once (on the rank
that tells). A step that reseeds it from its step number moves it too and is warned about: the
warning says so. Owner: the Runtime (its thread); no cost after the first ``CHECKED`` updates."""
from __future__ import annotations

import sys
import warnings
from typing import Any, Mapping

CHECKED = 8


def _globals() -> list[tuple[str, Any, str]]:
    """(what the program calls, the generator object, how to give it as state) of each global
    generator whose module is loaded."""
    out = []
    np = sys.modules.get("numpy")
    gen = getattr(getattr(getattr(np, "random", None), "mtrand", None), "_rand", None)
    if gen is not None:
        out.append(("numpy's global random generator (numpy.random.rand, .normal, .shuffle, ...)", gen,
                    "numpy.random.mtrand._rand"))
    gen = getattr(sys.modules.get("random"), "_inst", None)
    if gen is not None:
        out.append(("the random module's functions (random.random, .shuffle, ...)", gen, "random._inst"))
    return out


def fingerprint(gen: Any) -> Any:
    """A value that changes when ``gen`` draws (a numpy RandomState or a random.Random)."""
    if hasattr(gen, "get_state"):
        kind, key, pos, has_gauss, gauss = gen.get_state()
        return kind, key.tobytes(), pos, has_gauss, gauss
    return gen.getstate()


class GlobalDraws:
    def __init__(self, state: Mapping[str, Any], *, tell: bool) -> None:
        given = {id(v) for v in state.values()}
        self._watched = [(what, gen, fix) for what, gen, fix in _globals() if id(gen) not in given] if tell else []
        self._last = [fingerprint(gen) for _what, gen, _fix in self._watched]
        self._left = CHECKED

    def after_update(self, step: int) -> None:
        """At the end of a step's ``rt.update()``."""
        if not self._watched:
            return
        self._left -= 1
        now = [fingerprint(gen) for _what, gen, _fix in self._watched]
        moved = [w for w, a, b in zip(self._watched, self._last, now) if a != b]
        self._last = now
        if moved:
            what, _gen, fix = moved[0]
            warnings.warn(
                f"dpmpi: step {step} drew from {what}, which is not in the state given to dpmpi.Runtime: a "
                f"recovery does not restore it, so a recovered run draws other numbers and can end with other "
                f"results than a failure-free one. Give it as state ({{..., 'rng': {fix}}}) or use a "
                f"numpy.random.Generator in the state; a step that seeds it from its step number is safe",
                RuntimeWarning, stacklevel=5)
        if moved or self._left <= 0:
            self._watched = []  # (warned once, or nothing seen over the first CHECKED updates)
