"""Random generators in a snapshot: ``Snapshot(comm, {"w": w, "rng": rng})`` with a
``numpy.random.Generator`` (or ``RandomState``, or Python's ``random.Random``) among the arrays.

A program that draws from a generator made once (``rng = np.random.default_rng(seed)``) in
every step ended a recovered run with other results than a failure-free one, silently (a
stranger's program, twenty-second session): the survivors' generators had drawn past the
restored epoch and the replacement's was at its start. Each generator is kept in the snapshot as
a small byte array holding its state (pickled, length first): written before every ``stage``,
read back after every ``restore`` that restored an epoch. Owner: the ``Snapshot`` (the caller's
thread: ``stage`` and ``restore`` run there).
"""
from __future__ import annotations

import pickle
import random
from typing import Any, Callable, Mapping

import numpy as np

SLOT_BYTES = 8192  # (MT19937's state, the largest of these, pickles to ~2.6 KB in numpy, ~5 KB in random)
_LEN = 8


def _is_generator(obj: Any) -> bool:
    return isinstance(obj, (np.random.Generator, np.random.RandomState, random.Random))


class Generators:
    """The generators among ``arrays``, each replaced there (in place) by its byte array."""

    def __init__(self, arrays: dict[str, Any]) -> None:
        self._held: list[tuple[Any, np.ndarray]] = []
        for name, obj in list(arrays.items()):
            if _is_generator(obj):
                buf = np.zeros(SLOT_BYTES, dtype=np.uint8)
                arrays[name] = buf
                self._held.append((obj, buf))

    @classmethod
    def filled(cls, arrays: Mapping[str, Any], load: Callable[[dict[str, Any]], int]) -> int:
        """``load(arrays)`` (``Snapshot.load`` from files: returns the epoch it read) with the
        generators among ``arrays`` as byte arrays, then read back into the generators."""
        plain = dict(arrays)
        generators = cls(plain)
        epoch = load(plain)
        generators.load(epoch)
        return epoch

    def save(self) -> None:
        """Each generator's state into its array (before a stage)."""
        for gen, buf in self._held:
            data = pickle.dumps(_state(gen), protocol=pickle.HIGHEST_PROTOCOL)
            if len(data) > SLOT_BYTES - _LEN:
                raise ValueError(f"a random generator's state takes {len(data)} bytes, more than the "
                                 f"{SLOT_BYTES - _LEN} dpmpi keeps for one")
            buf[:_LEN] = np.frombuffer(len(data).to_bytes(_LEN, "little"), dtype=np.uint8)
            buf[_LEN:_LEN + len(data)] = np.frombuffer(data, dtype=np.uint8)

    def load(self, epoch: int) -> None:
        """Each generator's state from its array, after a restore that restored ``epoch`` (none
        when it is -1: nothing restored); an array never written leaves its generator as it is."""
        if epoch < 0:
            return
        for gen, buf in self._held:
            n = int.from_bytes(buf[:_LEN].tobytes(), "little")
            if n:
                _set_state(gen, pickle.loads(buf[_LEN:_LEN + n].tobytes()))


def _state(gen: Any) -> Any:
    if isinstance(gen, np.random.Generator):
        return gen.bit_generator.state
    return gen.getstate() if isinstance(gen, random.Random) else gen.get_state()


def _set_state(gen: Any, state: Any) -> None:
    if isinstance(gen, np.random.Generator):
        gen.bit_generator.state = state
    elif isinstance(gen, random.Random):
        gen.setstate(state)
    else:
        gen.set_state(state)
