"""Device arrays in ``dpmpi.Snapshot`` (and so in ``dpmpi.Runtime``): the narrow interface that
the snapshot calls in three places (marked "GPU" there).

- ``mirrors(arrays)``: the device arrays among a snapshot's arrays (CuPy's, or the fake
  backend's) get each a host mirror: page-aligned anonymous memory, registered as pinned memory
  (cudaHostRegister) once, unregistered in ``close`` before it is unmapped. The snapshot
  registers the mirrors in their place, so its slots, checksums, replication and restore treat
  them as any host array.
- ``stage()`` (from ``Snapshot.stage``, before its host copy starts): the device -> mirror copies
  run on this object's own stream, by the copy engine (cudaMemcpyAsync into pinned memory, no
  CPU thread copies), after the work already enqueued on the program's current stream (a
  device-side wait on its event); the host waits for the copy's event by polling (with dpmpi's
  failure notice and ``DPMPI_GPU_TIMEOUT``), never with a stream synchronize. Only then does the
  snapshot copy the mirror into its slot, so its double buffer flips after the device copy's
  event completed.
- ``restore()`` (after the snapshot wrote a restored epoch into the mirrors): mirror -> device
  on the same stream, polled the same way.

What it does not do yet: copy straight from the device into the snapshot's slot (there is one
extra host copy, mirror -> slot, by the snapshot's C threads), nor overlap the device copy with
the next step (``stage`` returns once the device copy is done). ``Snapshot.load`` (files) takes
host arrays only.

Owner and lifetime: one ``DeviceMirrors`` per Snapshot, used by the thread that calls the
snapshot's ``stage``/``restore`` (the main thread); its stream and pinned memory live until
``close``.
"""
from __future__ import annotations

import mmap
import time
from typing import Any

import numpy as np

from dpmpi.gpu import poll, settings


class DeviceMirrors:
    """Pinned host mirrors of device arrays, and the copies between them (see the module)."""

    def __init__(self, backend: Any, device: dict[str, Any]) -> None:
        self.backend = backend
        self.device = dict(device)  # name -> the program's device array
        self.host: dict[str, np.ndarray] = {}  # name -> its mirror (what the snapshot registers)
        self._maps: list[mmap.mmap] = []
        self._handles: list[Any] = []
        self.stream = backend.new_stream()
        self.stats = {"stage_ms": 0.0, "restore_ms": 0.0, "bytes": 0}
        for name, a in self.device.items():
            if not a.flags.c_contiguous:
                raise ValueError(f"snapshot array {name!r} (a device array) is not C-contiguous; register "
                                 f"xp.ascontiguousarray(...) and keep using that array")
            mem = mmap.mmap(-1, max(a.nbytes, 1))  # page-aligned, zeroed, ours to unmap
            self._maps.append(mem)
            view = np.frombuffer(mem, np.uint8, count=a.nbytes).view(a.dtype).reshape(a.shape)
            self._handles.append(backend.register_host(view) if a.nbytes else None)
            self.host[name] = view
            self.stats["bytes"] += a.nbytes

    def _copy(self, to_host: bool, what: str) -> None:
        t0 = time.perf_counter()
        be = self.backend
        be.wait_event(self.stream, be.record(be.stream(None)))  # after the program's enqueued work
        for name, dev in self.device.items():
            if dev.nbytes:
                if to_host:
                    be.to_host_async(dev, self.host[name], self.stream)
                else:
                    be.to_device_async(self.host[name], dev, self.stream)
        poll.wait(be, be.record(self.stream), None, None, settings.op_timeout(), what)
        self.stats["stage_ms" if to_host else "restore_ms"] = 1e3 * (time.perf_counter() - t0)

    def stage(self) -> None:
        """Device -> mirrors; returns when the copies' event completed (polled)."""
        self._copy(True, "device snapshot (device -> host)")

    def restore(self) -> None:
        """Mirrors -> device; returns when the copies' event completed (polled)."""
        self._copy(False, "device snapshot restore (host -> device)")

    def close(self) -> None:
        """Unregister the pinned mirrors, then unmap them (local; idempotent)."""
        for handle in self._handles:
            if handle is not None:
                self.backend.unregister_host(handle)
        self._handles = []
        self.host.clear()
        for mem in self._maps:
            try:
                mem.close()
            except BufferError:  # a view still exported somewhere: the mapping ends with it
                pass
        self._maps = []


def mirrors(arrays: dict[str, Any]) -> DeviceMirrors | None:
    """For a Snapshot's ``arrays`` (changed in place): put a pinned host mirror in place of each
    device array; returns the object that copies them (None: no device arrays)."""
    from dpmpi.gpu import get_backend, is_device_array

    device = {name: a for name, a in arrays.items() if is_device_array(a)}
    if not device:
        return None
    dm = DeviceMirrors(get_backend(), device)
    arrays.update(dm.host)
    return dm
