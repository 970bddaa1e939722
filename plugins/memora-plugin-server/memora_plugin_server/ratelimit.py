"""Rate-limit buckets: per process, or shared by the workers of one machine through a file.

A token bucket per caller: ``per_minute`` requests a minute, bursts of a tenth of it (at least
``burst``).  :class:`Buckets` keeps them in the process (one worker).  With ``memora serve
--workers N`` each worker alone would be a fresh allowance — N workers, N times the limit, and
a caller whose connections land on another worker starts again — so :class:`SharedBuckets`
keeps them in a small file every worker maps into memory:

- a header and 4,096 slots of 24 bytes (key, level, time): 96 KB however many callers; a caller
  is the first 8 bytes of a BLAKE2b digest of its kind and name (never the token), placed by
  open addressing over 8 slots; when all 8 hold other callers, the one idle longest is
  replaced (it was refilling towards a full bucket anyway);
- every take is a read-modify-write under ``flock`` — microseconds of memory work, no disk
  wait (the page cache holds the file; nothing is fsynced: an allowance need not survive a
  reboot); a worker killed while holding the lock lets it go with the process;
- times are ``time.monotonic()``, one clock for every process of the machine; a slot that does
  not make sense (a time in the future, a level that is not a number) is read as a full bucket.

The file is private (0600, created without following a link) and named by the server's port, so
two servers of one user keep their own allowances.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import math
import mmap
import os
import stat
import struct
import time
from pathlib import Path

__all__ = ["Buckets", "RateFile", "SharedBuckets"]

_MAGIC = b"memora-rate-1\0\0\0"
_SLOT = struct.Struct("<8sdd")
SLOTS = 4096
PROBE = 8
_SIZE = len(_MAGIC) + SLOTS * _SLOT.size


class Buckets:
    """Token buckets in this process: ``per_minute`` a minute, bursts of a tenth of it (at
    least ``burst``)."""

    def __init__(self, per_minute: int, *, burst: float = 10.0) -> None:
        self.rate = per_minute / 60.0
        self.capacity = max(burst, per_minute / 10.0)
        self._buckets: dict[str, tuple[float, float]] = {}

    def take(self, who: str) -> float:
        """0 when the request may go, else the seconds until it may."""
        now = time.monotonic()
        level, at = self._buckets.get(who, (self.capacity, now))
        level = min(self.capacity, level + (now - at) * self.rate)
        if level < 1.0:
            self._buckets[who] = (level, now)
            return (1.0 - level) / self.rate
        self._buckets[who] = (level - 1.0, now)
        if len(self._buckets) > 10_000:  # forget full buckets: they are the default
            self._buckets = {k: v for k, v in self._buckets.items() if v[0] < self.capacity - 1e-9}
        return 0.0


class RateFile:
    """The mapped file of :class:`SharedBuckets` (one per process, shared by its buckets)."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        flags = os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | getattr(os, "O_NOFOLLOW", 0)
        fd = os.open(path, flags, 0o600)
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid():
                raise OSError(f"{path} is not a regular file of this user")
            if st.st_mode & 0o077:
                os.fchmod(fd, 0o600)
            fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                if os.fstat(fd).st_size != _SIZE:
                    os.ftruncate(fd, 0)  # another layout or a torn start: begin empty
                    os.ftruncate(fd, _SIZE)
                self._map = mmap.mmap(fd, _SIZE)
                if self._map[: len(_MAGIC)] != _MAGIC:
                    self._map[:] = bytes(_SIZE)
                    self._map[: len(_MAGIC)] = _MAGIC
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)
        except BaseException:
            os.close(fd)
            raise
        self.path = path
        self._fd = fd

    def close(self) -> None:
        with contextlib.suppress(BufferError, ValueError):
            self._map.close()
        with contextlib.suppress(OSError):
            os.close(self._fd)

    def take(self, key: bytes, rate: float, capacity: float) -> float:
        """One request of the caller ``key`` (8 bytes) from its bucket: 0, or the wait."""
        now = time.monotonic()
        home = int.from_bytes(key[:4], "little") % SLOTS
        fcntl.flock(self._fd, fcntl.LOCK_EX)
        try:
            found = empty = oldest = -1
            oldest_at = math.inf
            for i in range(PROBE):
                slot = (home + i) % SLOTS
                held, _, at = _SLOT.unpack_from(self._map, len(_MAGIC) + slot * _SLOT.size)
                if held == key:
                    found = slot
                    break
                if held == bytes(8):
                    if empty < 0:
                        empty = slot
                elif at < oldest_at:
                    oldest, oldest_at = slot, at
            if found >= 0:
                _, level, at = _SLOT.unpack_from(self._map, len(_MAGIC) + found * _SLOT.size)
                if not (math.isfinite(level) and math.isfinite(at)) or at > now + 1.0:
                    level, at = capacity, now
            else:
                found = empty if empty >= 0 else oldest
                level, at = capacity, now
            level = max(0.0, min(capacity, level + max(0.0, now - at) * rate))
            wait = 0.0 if level >= 1.0 else (1.0 - level) / rate
            if not wait:
                level -= 1.0
            _SLOT.pack_into(self._map, len(_MAGIC) + found * _SLOT.size, key, level, now)
            return wait
        finally:
            fcntl.flock(self._fd, fcntl.LOCK_UN)


class SharedBuckets:
    """:class:`Buckets` kept in a :class:`RateFile`, so every worker draws on one allowance;
    ``kind`` keeps apart the callers of different limits in the one file."""

    def __init__(self, file: RateFile, kind: str, per_minute: int, *, burst: float = 10.0) -> None:
        self.file = file
        self.kind = kind
        self.rate = per_minute / 60.0
        self.capacity = max(burst, per_minute / 10.0)

    def take(self, who: str) -> float:
        key = hashlib.blake2b(f"{self.kind}\0{who}".encode(), digest_size=8).digest()
        if key == bytes(8):  # the empty slot's mark (never in practice)
            key = b"\1" + key[1:]
        return self.file.take(key, self.rate, self.capacity)
