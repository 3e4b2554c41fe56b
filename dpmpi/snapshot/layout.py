"""Where each registered array lives in a snapshot slot, and the checks on registered arrays.

A layout is a tuple of ``Entry`` (name, buffer format, shape, bytes, offset in the slot); its
``signature`` (the same without offsets, JSON-friendly) is what ranks exchange and files record,
and ``from_signature`` rebuilds the entries from it (a buddy's slot is sized from its signature).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping

ALIGN = 64  # arrays start at 64-byte offsets in a slot (the copy kernel streams 32-byte stores)
# arrays of 64 KiB or more start at 4 KiB offsets: their whole pages line up with the array's, so
# that a restore can exchange pages instead of copying (dpmpi.snapshot.pageswap)
PAGE_ALIGN, PAGE_ALIGN_MIN = 4096, 64 << 10


@dataclass(frozen=True)
class Entry:
    name: str
    format: str
    shape: tuple[int, ...]
    nbytes: int
    offset: int


def view(name: str, obj: Any) -> memoryview:
    """A writable C-contiguous view of a registered array (of its transpose for an array in
    Fortran order, whose bytes are contiguous too), or an error that names the problem."""
    try:
        mv = memoryview(obj)
    except TypeError:
        raise TypeError(
            f"snapshot array {name!r} is a {type(obj).__name__}, which does not expose the buffer protocol; "
            f"register a numpy array (or a bytearray, array.array, ...)") from None
    if not mv.c_contiguous and mv.f_contiguous and mv.ndim > 1 and hasattr(obj, "T"):
        mv = memoryview(obj.T)  # (Fortran order: the same bytes, C-contiguous once transposed)
    if not mv.c_contiguous:
        raise ValueError(f"snapshot array {name!r} is not contiguous (a strided view); register the whole "
                         f"array it is a view of, or numpy.ascontiguousarray(...) and keep using that array")
    if any(c.__name__ == "MaskedArray" and c.__module__.startswith("numpy") for c in type(obj).__mro__):
        # (accepted before the twenty-fourth session: the data was restored, the mask was not, and
        # a replacement ended with another mask than its survivors, exit code 0, no error)
        raise TypeError(f"snapshot array {name!r} is a numpy masked array: its mask is a second array that a "
                        f"snapshot of it would not hold, so a recovered rank would get another mask. Register "
                        f"its data and a boolean array for the mask as two arrays, and make the masked array "
                        f"from them where it is used (numpy.ma.masked_array(data, mask=mask))")
    if "O" in mv.format:  # (struct code of a PyObject*: an object array, or a record with such a field)
        raise TypeError(f"snapshot array {name!r} holds Python object references (dtype=object): they mean "
                        f"nothing in another process, which a restore may be. Register numbers (a numeric dtype)")
    if mv.readonly:
        if any(c.__name__ == "generic" and c.__module__ == "numpy" for c in type(obj).__mro__):
            raise ValueError(f"snapshot array {name!r} is a numpy scalar ({type(obj).__name__}), which cannot be "
                             f"written back; register a 0-d or 1-element array (numpy.zeros(()), "
                             f"numpy.zeros(1)) and update it in place (x[...] = v)")
        raise ValueError(f"snapshot array {name!r} is read-only; restore() must write it back. Register a "
                         f"writable array (numpy: arr.flags.writeable must be True)")
    return mv


def _placed(items: Iterable[tuple[str, str, tuple[int, ...], int]]) -> tuple[Entry, ...]:
    entries, offset = [], 0
    for name, fmt, shape, nbytes in items:
        if nbytes >= PAGE_ALIGN_MIN:
            offset = (offset + PAGE_ALIGN - 1) // PAGE_ALIGN * PAGE_ALIGN
        entries.append(Entry(name, fmt, tuple(shape), nbytes, offset))
        offset += (nbytes + ALIGN - 1) // ALIGN * ALIGN
    return tuple(entries)


def layout(arrays: Mapping[str, Any], described: Mapping[str, Any] | None = None) -> tuple[Entry, ...]:
    """The layout of ``arrays`` (checked: buffers, C-contiguous, writable), in their order.
    ``described``: arrays that are not host buffers (device arrays), by name: their
    ``(format, shape, nbytes)``."""
    described = described or {}

    def item(name: str, obj: Any) -> tuple[str, str, tuple[int, ...], int]:
        if name in described:
            fmt, shape, nbytes = described[name]
            return name, fmt, tuple(shape), nbytes
        v = view(name, obj)
        return name, v.format, tuple(v.shape), v.nbytes

    return _placed(item(name, obj) for name, obj in arrays.items())


def signature(entries: tuple[Entry, ...]) -> list:
    return [[e.name, e.format, list(e.shape), e.nbytes] for e in entries]


def from_signature(sig: list) -> tuple[Entry, ...]:
    """The entries of another rank's layout, from its signature."""
    return _placed((name, fmt, tuple(shape), nbytes) for name, fmt, shape, nbytes in sig)


def total(entries: tuple[Entry, ...]) -> int:
    """Bytes of a slot that holds ``entries``."""
    return max([e.offset + e.nbytes for e in entries], default=0)


def checked_views(entries: tuple[Entry, ...], arrays: Mapping[str, Any]) -> list[memoryview]:
    """Views of the registered (host) arrays, checked against the registration (same format, shape)."""
    views = []
    for entry in entries:
        v = view(entry.name, arrays[entry.name])
        if v.format != entry.format or tuple(v.shape) != entry.shape:
            raise ValueError(
                f"snapshot array {entry.name!r} changed since registration: it was {entry.format} "
                f"{entry.shape}, it is {v.format} {tuple(v.shape)}. Update arrays in place "
                f"(w[...] = ...), or make a new Snapshot")
        views.append(v)
    return views
