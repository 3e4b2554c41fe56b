"""The names by which a program holds the arrays it gave ``dpmpi.Runtime`` as its state, and
whether a step bound one of them to a new array: ``w = w - lr * g`` instead of ``w -= lr * g``.

The runtime snapshots and restores the arrays it was given, so after such a rebinding it keeps
snapshotting the old array, and a recovery restores that one while the program goes on from its
new one: the result differs from a failure-free run's, silently (a stranger's program did this).
Watched: the module-level names of the code that made the ``Runtime`` (its globals), the
variables a step function closes over (``nonlocal``) and the entries of the state dict the
program passed. Attributes (``self.w = ...``) and names made after the ``Runtime`` are not. A
name moved to another state array (double buffers swapped by name) is refused too: which array a
name holds is not state, so a replacement's would differ from the survivors'. Owner: the
``Runtime`` (its thread)."""
from __future__ import annotations

from typing import Any, Callable, Mapping


class Aliases:
    def __init__(self, namespace: Mapping[str, Any], state: Mapping[str, Any]) -> None:
        self._keys = {id(a): key for key, a in state.items()}
        self._arrays = list(state.values())  # (the ids above stay those of these objects)
        self._watched: list[tuple[Callable[[], Any], str, Any]] = []
        for name, obj in list(namespace.items()):
            if id(obj) in self._keys:
                self._watched.append((lambda n=name: namespace.get(n), f"the global '{name}'", obj))
        for key, obj in list(state.items()):  # (the program's own dict: weights["w"] = ...)
            self._watched.append((lambda k=key: state.get(k), f"the entry {key!r} of the state dict", obj))

    def watch_step(self, step_fn: Callable[..., Any]) -> None:
        """Also watch the variables ``step_fn`` closes over that hold a state array."""
        code, cells = getattr(step_fn, "__code__", None), getattr(step_fn, "__closure__", None) or ()
        for name, cell in zip(code.co_freevars if code else (), cells):
            try:
                obj = cell.cell_contents
            except ValueError:  # (an empty cell)
                continue
            if id(obj) in self._keys and not any(w[1].endswith(f"'{name}'") and w[2] is obj for w in self._watched):
                self._watched.append((lambda c=cell: c.cell_contents, f"the variable '{name}'", obj))

    def check(self, step: int) -> None:
        """Raise if a watched name now holds another array than the state array it held."""
        for get, what, obj in self._watched:
            now = get()
            if now is not obj and id(now) in self._keys:  # (ping-pong buffers swapped by name)
                raise RuntimeError(
                    f"step {step} bound {what} to the array registered as state {self._keys[id(now)]!r} (it held "
                    f"{self._keys[id(obj)]!r}): which array a name holds is not part of the state, so after a "
                    f"recovery the replacement's name would hold another one than the survivors'. Pick the "
                    f"buffer from the step number instead (bufs[k % 2])")
            if now is not obj and hasattr(now, "shape") and hasattr(now, "dtype"):
                key = self._keys[id(obj)]
                raise RuntimeError(
                    f"step {step} bound {what} to a new array inside rt.update(); dpmpi.Runtime snapshots the "
                    f"array it was given as state {key!r} (which {what} held), so a recovery would restore that "
                    f"one and not what the program goes on with. Modify the state in place (w -= lr * g, "
                    f"w[...] = new) instead of assigning a new array to the name")
