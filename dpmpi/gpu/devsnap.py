"""Device arrays in ``dpmpi.Snapshot`` (and so in ``dpmpi.Runtime``): the narrow interface the
snapshot's buffers call (``dpmpi/snapshot/buffers.py``, marked "device" there).

- ``device_slots(arrays)``: the device arrays among a snapshot's arrays (CuPy's, or the fake
  backend's); the snapshot lays them out in its slots like host arrays (``describe``).
- ``register(slot)``: each of the snapshot's own two slots is registered as pinned memory
  (cudaHostRegister) when the Snapshot is made, and unregistered in ``close`` before the slot
  is freed.
- ``to_slot(slot, entries)`` (from the snapshot's stage, once nothing may still need the slot):
  device -> slot copies straight into the slot, on this object's own stream, by the copy engine
  (cudaMemcpyAsync into registered memory; no CPU thread copies, no intermediate buffer), after
  the work already enqueued on the program's current stream (a device-side wait on its event).
  The host waits for the copies' event by polling (dpmpi's failure notice, ``DPMPI_GPU_TIMEOUT``),
  never with a stream synchronize. Only then does the snapshot's C engine read those bytes of the
  slot for the checksum (and copy the host arrays), so the double buffer flips after the device
  copy's event completed.
- ``start(slot, entries, to_slot=False)`` + ``finish(event)`` (a restore): slot -> device on the
  same stream, polled the same way; the restore checks the slot's checksum on the CPU while the
  copy engine moves the bytes (a failed checksum fails the restore on every rank, as for host
  arrays, whose copy back also checks on the way).

What it does not do: overlap the device copy with the next step (``stage`` returns once the
device copy is done). ``Snapshot.load`` (files) takes host arrays only.

Owner and lifetime: one ``DeviceSlots`` per Snapshot, used by the thread that calls the
snapshot's ``stage``/``restore`` (the main thread); its stream lives until ``close``, the
registrations until ``close`` too (a Snapshot kept for the process's life keeps them).
"""
from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from dpmpi.gpu import poll, settings


class Described(NamedTuple):
    """How a device array is laid out in a slot: what a host array's memoryview would say."""

    format: str
    shape: tuple[int, ...]
    nbytes: int


def describe(a: Any) -> Described:
    return Described(memoryview(np.empty(0, dtype=a.dtype)).format, tuple(int(n) for n in a.shape), int(a.nbytes))


def slot_view(slot: Any, entry: Any) -> np.ndarray:
    """The bytes of ``entry`` in ``slot`` as a host array of the entry's size."""
    return np.frombuffer(slot.part(entry), np.uint8)


class DeviceSlots:
    """Copies between device arrays and the snapshot's registered slots (see the module)."""

    def __init__(self, backend: Any, device: dict[str, Any]) -> None:
        self.backend = backend
        self.device = dict(device)  # name -> the program's device array
        for name, a in self.device.items():
            if not a.flags.c_contiguous:
                raise ValueError(f"snapshot array {name!r} (a device array) is not C-contiguous; register "
                                 f"xp.ascontiguousarray(...) and keep using that array")
        self._registered: list[tuple[Any, Any]] = []  # (slot, handle)
        self.stream = backend.new_stream()

    def register(self, slot: Any) -> None:
        """Register one of the snapshot's own slots as pinned memory (once per slot)."""
        if slot.nbytes:
            self._registered.append((slot, self.backend.register_host(slot.buffer())))

    def start(self, slot: Any, entries: tuple, to_slot: bool) -> Any:
        """Enqueue the copies between the device arrays and ``slot`` (after the work already
        enqueued on the program's current stream); return the event to ``finish`` on."""
        be = self.backend
        be.wait_event(self.stream, be.record(be.stream(None)))  # after the program's enqueued work
        for e in entries:
            dev = self.device.get(e.name)
            if dev is None or not e.nbytes:
                continue
            host = slot_view(slot, e)
            if to_slot:
                be.to_host_async(dev, host, self.stream)
            else:
                be.to_device_async(host, dev, self.stream)
        return be.record(self.stream)

    def finish(self, event: Any, what: str) -> None:
        """Return once ``event`` (of ``start``) completed (polled; ``DPMPI_GPU_TIMEOUT``)."""
        poll.wait(self.backend, event, None, None, settings.op_timeout(), what)

    def to_slot(self, slot: Any, entries: tuple) -> None:
        """Device -> slot; returns when the copies' event completed (polled)."""
        self.finish(self.start(slot, entries, True), "device snapshot (device -> host)")

    def close(self) -> None:
        """Unregister the slots (before the snapshot frees them)."""
        while self._registered:
            _slot, handle = self._registered.pop()
            self.backend.unregister_host(handle)


def device_slots(arrays: dict[str, Any]) -> DeviceSlots | None:
    """The object that copies a Snapshot's device arrays (None: it has none)."""
    from dpmpi.gpu import get_backend, is_device_array

    device = {name: a for name, a in arrays.items() if is_device_array(a)}
    if not device:
        return None
    return DeviceSlots(get_backend(), device)
