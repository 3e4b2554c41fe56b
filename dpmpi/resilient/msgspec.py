"""Where the bytes of an mpi4py buffer argument lie, read as mpi4py reads it: a message
(``buf``, ``[buf, datatype]``, ``[buf, count]``, ``[buf, (count, displ)]``, ``[buf, count,
datatype]``, ``[buf, (count, displ), datatype]``, ``[buf, count, displ, datatype]``) or a vector
one (the same forms with counts and displacements per rank: ``Scatterv``'s input). The prologue
records and answers calls with them (``prologue_calls``). Pure functions: no MPI call but a
datatype's size and extent; only contiguous buffers and datatypes without gaps (what a
replacement could be answered with byte for byte), anything else a ``ValueError`` saying why."""
from __future__ import annotations

from numbers import Integral
from typing import Any

from mpi4py import MPI


def _is_datatype(x: Any) -> bool:
    return isinstance(x, (MPI.Datatype, str))


def _base(buf: Any, datatype: Any) -> tuple[memoryview, int]:
    """The whole buffer as bytes and the size of one of its entries."""
    view = memoryview(buf)
    if not view.contiguous:
        raise ValueError("a non-contiguous buffer")
    if datatype is None:
        return view.cast("B"), view.itemsize
    kind = MPI._typedict.get(datatype) if isinstance(datatype, str) else datatype
    if not isinstance(kind, MPI.Datatype):
        raise ValueError(f"an unknown datatype {datatype!r}")
    lower, extent = kind.Get_extent()
    if lower != 0 or extent <= 0 or kind.Get_size() != extent:
        raise ValueError("a datatype with gaps or a lower bound")
    return view.cast("B"), extent


def _unpacked(spec: Any, pair: type | tuple[type, ...]) -> tuple[Any, Any, Any, Any]:
    """(buffer, count(s), displacement(s), datatype) of a message as mpi4py unpacks it; a count
    of the type ``pair`` is a (count, displacement) pair (a vector message's: a tuple only, as
    its counts may be a list)."""
    buf, count, displ, datatype = spec, None, None, None
    if isinstance(spec, (list, tuple)):
        if len(spec) == 2:
            buf, count = spec
            if _is_datatype(count):
                count, datatype = None, count
            elif isinstance(count, pair):
                count, displ = count
        elif len(spec) == 3:
            buf, count, datatype = spec
            if isinstance(count, pair):
                count, displ = count
        elif len(spec) == 4:
            buf, count, displ, datatype = spec
        else:
            raise ValueError("a message of 2 to 4 items")
    if buf is None or buf is MPI.IN_PLACE or buf is MPI.BOTTOM:
        raise ValueError("MPI.IN_PLACE, MPI.BOTTOM or no buffer")
    return buf, count, displ, datatype


def whole(spec: Any) -> memoryview:
    """The whole buffer a message or vector message names, as bytes (its counts aside)."""
    return _base(_unpacked(spec, tuple)[0], None)[0]


def region(spec: Any) -> memoryview:
    """The bytes a message (one count) names: from its displacement, its count's entries (all
    the rest of the buffer when no count is given)."""
    buf, count, displ, datatype = _unpacked(spec, (list, tuple))
    view, size = _base(buf, datatype)
    start = int(displ or 0) * size
    end = view.nbytes if count is None else start + int(count) * size
    if start > view.nbytes or end > view.nbytes or end < start:
        raise ValueError(f"a count or displacement beyond its buffer of {view.nbytes} bytes")
    if count is None and (end - start) % size:
        raise ValueError(f"a buffer of {view.nbytes} bytes is not a whole number of {size}-byte entries")
    return view[start:end]


def parts(spec: Any, n: int | None = None) -> list[memoryview]:
    """The blocks of a vector message, one per rank (``n`` of them; None: as many as its counts
    or displacements list, which one of them must then be)."""
    buf, counts, displs, datatype = _unpacked(spec, tuple)
    view, size = _base(buf, datatype)
    listed = [x for x in (counts, displs) if x is not None and not isinstance(x, Integral)]
    n = len(listed[0]) if n is None and listed else n
    if n is None:
        raise ValueError("counts and displacements not given as lists (the number of ranks is not known here)")
    if counts is None:
        entries = view.nbytes // size
        counts = [entries // n + (entries % n > i) for i in range(n)]
    elif isinstance(counts, Integral):
        counts = [counts] * n
    counts = [int(c) for c in counts]
    if displs is None:
        displs = [sum(counts[:i]) for i in range(n)]
    elif isinstance(displs, Integral):
        displs = [displs * i for i in range(n)]
    displs = [int(d) for d in displs]
    if len(counts) != n or len(displs) != n:
        raise ValueError(f"{len(counts)} counts and {len(displs)} displacements for {n} ranks")
    blocks = [view[d * size:(d + c) * size] for c, d in zip(counts, displs)]
    if any(b.nbytes != c * size or c < 0 or d < 0 for b, c, d in zip(blocks, counts, displs)):
        raise ValueError(f"a count or displacement beyond its buffer of {view.nbytes} bytes")
    return blocks
