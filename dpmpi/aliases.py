"""The names by which a program holds the arrays it gave ``dpmpi.Runtime`` as its state, and
whether a step bound one of them to a new array: ``w = w - lr * g`` instead of ``w -= lr * g``.

The runtime snapshots and restores the arrays it was given, so after such a rebinding it keeps
snapshotting the old array, and a recovery restores that one while the program goes on from its
new one: the result differs from a failure-free run's, silently (a stranger's program did this).
Watched: the module-level names of the code that made the ``Runtime`` (its globals), the
variables a step function closes over (``nonlocal``), the entries of the state dict the
program passed, and up to three levels inside what those hold and inside the object a
bound-method step belongs to: attributes (``self.w = self.w - lr * self.m``, a stranger's
class-based model, twenty-first session; ``self.layers[0].w``) and the items of dicts and lists.
Deeper holders, objects of dpmpi, mpi4py and numpy, and names made after the ``Runtime`` are
not. A name moved to another state array (double buffers swapped by name) is refused too: which
array a name holds is not state, so a replacement's would differ from the survivors'. What no
name shows (deeper holders, a copy) is caught afterwards, as a warning: the state's checksum
staying the same over a process's first snapshots (``committed``). Owner: the ``Runtime`` (its thread)."""
from __future__ import annotations

import types
import warnings
from typing import Any, Callable, Mapping

from dpmpi.rngwatch import GlobalDraws


class Aliases:
    def __init__(self, namespace: Mapping[str, Any], state: Mapping[str, Any], *, judge_unchanged: bool = True,
                 tell: bool = False) -> None:
        self._draws = GlobalDraws(state, tell=tell)  # (global generators the steps draw from: rngwatch)
        self._keys = {id(a): key for key, a in state.items()}
        self._arrays = list(state.values())  # (the ids above stay those of these objects)
        self._watched: list[tuple[Callable[[], Any], str, Any]] = []
        self._holders: list[Any] = [state]  # (keeps the ids in _seen those of these objects)
        self._seen: set[tuple[int, Any]] = {(id(state), ("item", key)) for key in state}  # (holder's id, its member)
        self._visited: set[int] = {id(state)}  # holders looked into by the current scan (_watch_inside)
        # snapshots in a row, from this process's first, with the checksum of the one before
        # (committed); None once judged (it changed, or the warning was given) or not to judge
        # (a rank whose state is empty, e.g. no rows of an uneven decomposition, cannot change it)
        self._unchanged: int | None = 0 if judge_unchanged and any(map(_holds_bytes, state.values())) else None
        for key, obj in list(state.items()):  # (the program's own dict: weights["w"] = ...)
            self._watched.append((lambda k=key: state.get(k), f"the entry {key!r} of the state dict", obj))
        for name, obj in list(namespace.items()):
            if id(obj) in self._keys:
                self._watched.append((lambda n=name: namespace.get(n), f"the global '{name}'", obj))
            elif not name.startswith("__"):
                self._watch_inside(lambda n=name: namespace.get(n), obj, name)
        self._visited = set()  # (ids of objects not kept alive here: a later scan starts afresh)

    def _watch_inside(self, root: Callable[[], Any], holder: Any, name: str, path: tuple = (),
                      depth: int = 3) -> None:
        """Watch the attributes of ``holder`` (an instance of the program's classes) and the items
        of its dicts and lists that hold a state array, and so on ``depth`` levels down
        (``self.layers[0].w``): each by its path from ``root()``, so that replacing a holder on
        the way (``self.layers[0] = Layer()``) counts too; ``name``: how the program refers to
        ``root()``. At most ``_MAX_VISITS`` holders for one Runtime (a large global structure)."""
        if id(holder) in self._visited or len(self._visited) >= _MAX_VISITS:
            return
        self._visited.add(id(holder))
        for step, label, obj in _members(holder):
            here = (*path, step)
            if id(obj) in self._keys:
                if (id(holder), step) not in self._seen:
                    self._seen.add((id(holder), step))
                    self._holders.append(holder)
                    kind = "attribute" if step[0] == "attr" else "item"
                    self._watched.append((lambda r=root, p=here: _follow(r, p), f"the {kind} '{name}{label}'", obj))
            elif depth > 1:
                self._watch_inside(root, obj, name + label, here, depth - 1)

    def watch_step(self, step_fn: Callable[..., Any]) -> None:
        """Also watch the variables ``step_fn`` closes over that hold a state array, what they hold
        (``_watch_inside``) and, for a bound method, its object's attributes."""
        code, cells = getattr(step_fn, "__code__", None), getattr(step_fn, "__closure__", None) or ()
        self._visited = {id(self._holders[0])}  # (the state dict: watched by its keys)
        for name, cell in zip(code.co_freevars if code else (), cells):
            try:
                obj = cell.cell_contents
            except ValueError:  # (an empty cell)
                continue
            if id(obj) in self._keys and not any(w[1].endswith(f"'{name}'") and w[2] is obj for w in self._watched):
                self._watched.append((lambda c=cell: c.cell_contents, f"the variable '{name}'", obj))
            elif id(obj) not in self._keys:
                self._watch_inside(lambda c=cell: c.cell_contents, obj, name)
        owner = getattr(step_fn, "__self__", None)  # (rt.run(model.step, n): the model's attributes)
        if owner is not None:
            self._watch_inside(lambda o=owner: o, owner, "self")
        self._visited = set()

    def committed(self, epoch: int, own: Mapping[int, int], every: int) -> None:
        """After the commit of ``epoch``: ``own`` is what this rank holds of its own state
        ({epoch: checksum}, ``Snapshot.holdings()``), ``every`` the epochs between two snapshots.
        Warns once when the state's checksum stayed the same over this process's first
        ``UNCHANGED_WARN`` snapshots after its first, each after steps that entered
        ``rt.update()``: the mark of a step that writes arrays the Runtime was not given
        (``self.layers[0].w = ...`` deeper than watched, a copy), which a recovery does not
        restore. A state that changed and then stops changing (a solver that converged) is not
        judged: it is no such mark."""
        if self._unchanged is None or epoch not in own or epoch - every not in own:
            return
        if own[epoch - every] != own[epoch]:
            self._unchanged = None  # it changes: the steps write the registered arrays
            return
        self._unchanged += 1
        if self._unchanged == UNCHANGED_WARN:
            self._unchanged = None
            warnings.warn(
                f"dpmpi: the state given to dpmpi.Runtime ({', '.join(map(repr, self._keys.values()))}) did not "
                f"change from epoch {epoch - UNCHANGED_WARN * every} to epoch {epoch}, although every step entered "
                f"rt.update(). If the steps write other arrays than those (a new array bound where dpmpi does not "
                f"look, a copy), a recovery restores arrays the program no longer uses and its result will differ "
                f"from a failure-free run's: modify the registered arrays in place", RuntimeWarning, stacklevel=4)

    def check(self, step: int) -> None:
        """Raise if a watched name now holds another array than the state array it held (and warn
        if the step drew from a global generator that is not state: ``rngwatch``)."""
        self._draws.after_update(step)
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
                    f"w[...] = new) instead of assigning a new array to the name (one meant to keep a copy, "
                    f"such as the best weights so far, must not hold the state array itself: start it "
                    f"with a copy)")


UNCHANGED_WARN = 3
_MAX_ITEMS = 4096  # (larger holders are not looked into: a list of data, not of a model's arrays)
_MAX_VISITS = 10_000
_FOREIGN = ("dpmpi", "mpi4py", "numpy", "builtins")  # (their objects hold no program's state by name)


def _members(holder: Any) -> list[tuple[tuple[str, Any], str, Any]]:
    """The members of ``holder`` that may hold a state array: ((kind, key), label, value), for the
    items of a dict or list and the attributes of an instance of the program's classes."""
    try:
        if isinstance(holder, dict) and len(holder) <= _MAX_ITEMS:
            return [(("item", k), f"[{k!r}]", v) for k, v in list(holder.items())]
        if isinstance(holder, list) and len(holder) <= _MAX_ITEMS:
            return [(("item", i), f"[{i}]", v) for i, v in enumerate(list(holder))]
        attrs = getattr(holder, "__dict__", None)
        if (isinstance(attrs, dict) and len(attrs) <= _MAX_ITEMS and not isinstance(holder, _NOT_HOLDERS)
                and not (hasattr(holder, "shape") and hasattr(holder, "dtype"))
                and type(holder).__module__.split(".")[0] not in _FOREIGN):
            return [(("attr", a), f".{a}", v) for a, v in list(attrs.items())]
    except Exception:  # (a proxy whose lookups fail: not looked into)
        pass
    return []


_NOT_HOLDERS = (type, types.ModuleType, types.FunctionType, types.MethodType, types.BuiltinFunctionType)


def _follow(root: Callable[[], Any], path: tuple) -> Any:
    """What the program's name holds now at ``path`` from ``root()`` (None: no longer there)."""
    try:
        obj = root()
        for kind, key in path:
            if kind == "attr":
                attrs = getattr(obj, "__dict__", None)
                obj = attrs.get(key) if isinstance(attrs, dict) else None
            else:
                obj = obj[key]
        return obj
    except (LookupError, TypeError, ValueError):
        return None


def _holds_bytes(array: Any) -> bool:
    """Whether a state array holds any byte (one without ``nbytes`` or a buffer: assumed to)."""
    n = getattr(array, "nbytes", None)
    if n is None:
        try:
            n = memoryview(array).nbytes
        except TypeError:
            return True
    return n > 0
