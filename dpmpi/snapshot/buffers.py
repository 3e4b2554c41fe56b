"""The double buffer: this rank's two slots, the staging copy into the free one, sealing it as
a committed epoch, and writing a slot back into the registered arrays.

Owner: one ``Buffers`` per Snapshot owns the registered arrays' layout, the copy engine and the
two own slots; the engine's C threads write the slot being staged (never MPI), from ``stage``
until ``wait_copy`` returns.
"""
from __future__ import annotations

from typing import Any, Callable, Mapping

from dpmpi import config
from dpmpi.snapshot import pageswap
from dpmpi.snapshot.errors import SnapshotCopyError
from dpmpi.snapshot.layout import Entry, checked_views, total
from dpmpi.snapshot.native import Codes, Engine, Slot, cext, pointers, prefault, segments, swap_pages


class Buffers:
    """Two slots of this rank's state: ``committed`` indexes the newest committed one."""

    def __init__(self, arrays: Mapping[str, Any], entries: tuple[Entry, ...], threads: int, lock: bool,
                 device: Any = None, lazy: bool = False) -> None:
        self.arrays = dict(arrays)  # the program's arrays, device arrays included
        # device: the copies of the device arrays (dpmpi.gpu.devsnap.DeviceSlots; None: none),
        # straight between the device and the own slots, which it registers as pinned memory
        self.device = device
        self.entries = entries
        self.host_entries = tuple(e for e in entries if device is None or e.name not in device.device)
        self.nbytes = total(entries)
        ptrs, views = self.sources()
        # now, off the critical path: a restore writes into these pages. Once: faulting them in
        # again on each restore cost ~0.3 us per 4 KiB page even with every page there (600
        # arrays of 53 KiB: 2.4 ms; arrays in huge pages cost nothing)
        prefault(ptrs, views)
        self.engine = Engine(threads)
        # the arrays whose pages a restore may exchange with the slot's ({name: address}); the own
        # slots start in a page where those (else most bytes) start: Open MPI's single-copy reads
        # ran 3x slower into arrays a few bytes past their source's offset (docs/design.md, Staging)
        addresses = self._addresses(ptrs)
        self.swappable = self._swappable(views, addresses)
        addrs = self.swappable or addresses
        self.shift = pageswap.shift_for((a, e.nbytes) for e in entries if (a := addrs.get(e.name)) is not None)
        # lazy (a replacement's): mapped now, locked at their first write (``settle``), which for a
        # replacement restored straight into its arrays is its refill, off the restore's path
        lazy = lazy and device is None
        self.own = [Slot(self.nbytes, lock, self.shift, lazy), Slot(self.nbytes, lock, self.shift, lazy)]
        if device is not None:
            for slot in self.own:
                device.register(slot)
        self.committed = -1  # index of the own slot with the newest committed epoch
        self.staging: int | None = None  # index of the slot being staged
        self.epoch = -1  # the newest committed epoch
        self.unstaged: tuple[Slot, int, int] | None = None  # (slot, epoch, digest) before the last stage
        self.last_rc = 0  # the last copy job's result

    def _addresses(self, ptrs: list) -> dict[str, int]:
        """The registered host arrays' addresses (``ptrs``: ``sources()``'s), by name (none with
        device arrays: their slots are registered with the device as they are)."""
        if self.device is not None:
            return {}
        ffi = cext().ffi
        return {e.name: int(ffi.cast("uintptr_t", p)) for e, p in zip(self.host_entries, ptrs)}

    def _swappable(self, views: list[memoryview], addrs: dict[str, int]) -> dict[str, int]:
        minimum = config.get("DPMPI_SWAP_MIN")
        if self.device is not None or not minimum:
            return {}
        ranges = pageswap.anonymous_ranges()
        return {e.name: a for e, v in zip(self.host_entries, views)
                if v.nbytes >= minimum and pageswap.covered(ranges, a := addrs[e.name], a + v.nbytes)}

    def sources(self) -> tuple[list, list[memoryview]]:
        """Pointers to the registered host arrays, checked against the registration."""
        views = checked_views(self.host_entries, self.arrays)
        return pointers(views), views

    def _pairs(self, slot: Slot, ptrs: list) -> tuple[list, list, list[int]]:
        """Per entry: its bytes in ``slot``, its host array (from ``ptrs``, the host arrays'
        pointers; None: a device array) and its length."""
        host = dict(zip((e.name for e in self.host_entries), ptrs))
        in_slot, lens = segments(self.entries, slot.ptr)
        return in_slot, [host.get(e.name) for e in self.entries], lens

    def stage(self, gate: Any, before_write: Callable[[Slot], None]) -> None:
        """Start copying the arrays into the slot that does not hold the newest committed epoch,
        after ``gate`` (a replication) ends; ``before_write(slot)`` is called first (it waits for
        whatever still reads that slot). Device arrays are copied straight into the slot first (a
        polled device copy; the caller has waited for ``gate``), then the C engine copies the host
        arrays and computes the checksum of the whole slot, device bytes included."""
        target = 1 - self.committed if self.committed >= 0 else 0
        slot = self.own[target]
        before_write(slot)
        slot.settle()
        in_slot, host, lens = self._pairs(slot, self.sources()[0])
        # the slot's epoch stays restorable until the copy starts writing (it may wait for the
        # previous epoch's replication): remember it, in case that never happens
        self.unstaged = (slot, slot.epoch, slot.digest)
        slot.epoch = -1
        if self.device is not None:
            self.unstaged = None  # the device copy writes the slot now
            self.device.to_slot(slot, self.entries)
        # a device array's bytes are only read (checksum): no destination
        src = [h if h is not None else d for h, d in zip(host, in_slot)]
        dst = [d if h is not None else None for h, d in zip(host, in_slot)]
        self.engine.start(dst, src, lens, gate)
        self.staging = target

    def feed(self) -> tuple[Slot, tuple[Any, int]] | None:
        """The slot being staged and its copy (engine, job number), or None (device arrays)."""
        if self.staging is None or self.device is not None:
            return None
        return self.own[self.staging], (self.engine.raw, self.engine.job())

    def finish_copy(self) -> tuple[int, int, int]:
        """Wait for the staging copy: (the slot's index, the copy's result code, its checksum)."""
        target, self.staging = self.staging, None
        rc, digest = self.engine.wait()
        self.last_rc = rc
        return target, rc, digest

    def check_copy(self, epoch: int, rc: int) -> None:
        """A copy that failed raises SnapshotCopyError; the committed epoch is as it was."""
        if rc == Codes.injected():
            raise SnapshotCopyError(f"the staging copy for epoch {epoch} was stopped half-way (test hook); "
                                    f"the committed epoch {self.epoch} is intact")
        if rc != 0:
            raise SnapshotCopyError(f"the staging copy for epoch {epoch} failed (code {rc})")

    def seal(self, target: int, epoch: int, digest: int) -> Slot:
        """The copy into slot ``target`` is committed as ``epoch``."""
        slot = self.own[target]
        slot.epoch, slot.digest = epoch, digest
        self.unstaged = None
        self.committed, self.epoch = target, epoch
        return slot

    def discard_staging(self) -> None:
        """End a staging copy that will never be committed (before a restore)."""
        if self.staging is not None:
            self.last_rc, _digest = self.engine.wait()
            self.staging = None
        if self.unstaged is not None:
            slot, epoch_before, digest_before = self.unstaged
            if self.last_rc == Codes.gate_failed() and slot.epoch < 0:  # the copy never wrote: still intact
                slot.epoch, slot.digest = epoch_before, digest_before
            self.unstaged = None

    def holdings(self) -> dict[int, int]:
        """The committed epochs in the own slots: {epoch: checksum}."""
        return {s.epoch: s.digest for s in self.own if s.epoch >= 0}

    def receive_into(self, direct: bool) -> Slot:
        """The slot that a copy from a buddy is received into (both own slots are forgotten), or,
        ``direct``, whose header it is received into (its bytes go straight into the arrays)."""
        for s in self.own:
            s.epoch = -1
        if not direct:
            self.own[0].settle()
        return self.own[0]

    def can_receive_direct(self) -> bool:
        """Whether a copy from a buddy may be received straight into the arrays (host arrays only)."""
        return self.device is None

    def array_buffers(self) -> list[memoryview]:
        """The registered (host) arrays' bytes, entry by entry: where a direct restore receives."""
        ffi = cext().ffi
        ptrs, views = self.sources()
        return [memoryview(ffi.buffer(p, v.nbytes)) for p, v in zip(ptrs, views)]

    def checksum(self, slot: Slot, entries: tuple) -> int:
        """The checksum of ``slot`` laid out as ``entries`` (another rank's layout for a replica)."""
        return self.engine.checksum(*segments(entries, slot.ptr))

    def use_unfilled(self, epoch: int) -> Slot:
        """After a restore straight into the arrays: they hold ``epoch``, which own slot 0 will hold
        once the arrays are copied back into it (``start_refill``, ``finish_refill``; until then no
        own slot holds anything). The slot to refill is returned; the next stage writes the other."""
        for s in self.own:
            s.epoch = -1
        self.committed, self.epoch = 0, epoch
        return self.own[0]

    def use(self, slot: Slot, epoch: int) -> None:
        """After a restore: ``slot`` holds ``epoch``, the newest and only epoch kept."""
        self.committed = self.own.index(slot)
        for other in self.own:
            if other is not slot:
                other.epoch = -1
        self.epoch = epoch

    def forget(self, epoch: int) -> None:
        """After a restore from disk: no slot holds anything; ``epoch`` is the newest."""
        for s in self.own:
            s.epoch = -1
        self.committed, self.epoch = -1, epoch

    def write_back(self, slot: Slot, epoch: int) -> bool:
        """Copy ``slot`` into the arrays, checking its checksum on the way (one pass over the bytes,
        not a verify and then a copy); whether the bytes matched. False: the host arrays now hold
        a corrupt copy (the restore fails on every rank). Device arrays likewise: the copy
        engine writes them from the slot while the C engine checks the checksum."""
        if slot.epoch != epoch:
            return False
        ptrs, _views = self.sources()  # (their pages are there: faulted in when registered)
        in_slot, host, lens = self._pairs(slot, ptrs)
        device = self.device
        to_device = device.start(slot, self.entries, False) if device is not None else None
        self.engine.start(host, in_slot, lens)  # (None: a device array's bytes, checksummed only)
        rc, digest = self.engine.wait()
        if device is not None:  # (the slot is read by both until here: nothing writes it)
            device.finish(to_device, "device snapshot restore (host -> device)")
        if rc != 0:
            raise SnapshotCopyError(f"copying the snapshot back into the arrays failed (code {rc})")
        return digest == slot.digest

    def _unmoved(self, ptrs: list) -> list[bool]:
        """Per entry: whether its array may exchange pages (``swappable``, still at that address)."""
        ffi = cext().ffi
        return [self.swappable.get(e.name) == int(ffi.cast("uintptr_t", p)) for e, p in zip(self.host_entries, ptrs)]

    def can_swap(self) -> bool:
        """Whether ``swap_back`` would exchange pages (some registered array allows it)."""
        return bool(self.swappable) and any(self._unmoved(self.sources()[0]))

    def swap_back(self, slot: Slot, epoch: int) -> tuple[bool, int]:
        """Write ``slot`` (holding ``epoch``) into the host arrays by exchanging their whole pages
        with the slot's where they allow it (``pageswap``) and copying the other bytes: (whether
        the slot matched its checksum, checked first (False: nothing written), the bytes
        exchanged). The slot then holds the arrays' old bytes: ``start_refill`` copies the arrays
        back into it, ``finish_refill`` seals it."""
        if slot.epoch != epoch or self.checksum(slot, self.entries) != slot.digest:
            return False, 0
        ptrs = self.sources()[0]
        swapped = _exchange(slot, self.host_entries, ptrs, self._unmoved(ptrs))  # (no device arrays here)
        slot.epoch = -1  # (until finish_refill)
        return True, swapped

    def start_refill(self, slot: Slot) -> None:
        """Copy the arrays into ``slot`` on the copy threads (after ``swap_back``); the arrays must
        not change until ``finish_refill`` returns."""
        slot.settle()  # (a replacement's: its pages locked here, on the refill's background thread)
        in_slot, host, lens = self._pairs(slot, self.sources()[0])
        self.engine.start(in_slot, host, lens)

    def settle(self) -> None:
        """Both own slots' pages locked (a replacement's lazy ones), before the next stage."""
        for s in self.own:
            s.settle()

    def finish_refill(self, slot: Slot, epoch: int) -> None:
        """Wait for the refill; ``slot`` then holds ``epoch`` with the checksum of what was copied
        (the epoch's own, unless the program wrote into the arrays before ``wait_refill``, e.g.
        halo rows received before its update: those bytes are the program's to rewrite)."""
        rc, digest = self.engine.wait()
        slot.relock()
        if rc != 0:
            raise SnapshotCopyError(f"copying the arrays restored to epoch {epoch} back into this rank's copy "
                                    f"failed (code {rc}); its buddies still hold epoch {epoch}")
        slot.epoch, slot.digest = epoch, digest

    def close_device(self) -> None:
        """Unregister the slots from the device (the Snapshot closes)."""
        if self.device is not None:
            self.device.close()
            self.device = None


def _exchange(slot: Slot, entries: tuple[Entry, ...], ptrs: list, unmoved: list[bool]) -> int:
    """``Buffers.swap_back``'s writes: each entry's whole pages exchanged with the slot's where
    its array allows it (``unmoved``), the other bytes copied; the bytes exchanged."""
    ffi = cext().ffi
    swapped = 0
    for e, p, movable in zip(entries, ptrs, unmoved):
        src = slot.ptr + e.offset
        addr = int(ffi.cast("uintptr_t", p))
        cut = pageswap.split(addr, int(ffi.cast("uintptr_t", src)), e.nbytes) if movable else None
        if cut is not None and swap_pages(p + cut[0], src + cut[0], cut[1], slot.locked):
            head, body = cut
            ffi.memmove(p, src, head)
            ffi.memmove(p + head + body, src + head + body, e.nbytes - head - body)
            swapped += body
        else:
            ffi.memmove(p, src, e.nbytes)
    return swapped


def load(buffers: Buffers, read: Callable[[Mapping[str, Any]], None], epoch: int) -> None:
    """Fill ``buffers``' arrays from a file: ``read(arrays)`` writes every entry and checks the
    file's checksum. With device arrays, through own slot 0 and ``write_back``."""
    if buffers.device is None:
        read(buffers.arrays)
        return
    slot = buffers.own[0]
    read({e.name: slot.part(e) for e in buffers.entries})
    slot.epoch, slot.digest = epoch, buffers.checksum(slot, buffers.entries)
    if not buffers.write_back(slot, epoch):
        raise SnapshotCopyError(f"epoch {epoch} read from its file changed in memory before it was written back")
