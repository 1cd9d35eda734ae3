"""/dev/shm for the suite's scratch where it is a RAM disk with room: the test PostgreSQL
cluster (a few hundred throwaway databases) and the wheel test's two virtualenvs are made
and removed there far quicker than on a disk. A container's /dev/shm is often 64 MB, so
the free space is checked first; without room (or without /dev/shm) the system's
temporary directory is used."""

from __future__ import annotations

import os

SHM = "/dev/shm"
GIB = 1 << 30


def ram_disk(*, min_free: int, run_programs: bool = False) -> str | None:
    """/dev/shm when it is writable, has ``min_free`` bytes free and (``run_programs``) is
    not mounted noexec; else None, which ``tempfile`` reads as its default directory."""
    if not (os.path.isdir(SHM) and os.access(SHM, os.W_OK | os.X_OK)):
        return None
    stat = os.statvfs(SHM)
    if stat.f_bavail * stat.f_frsize < min_free:
        return None
    if run_programs and stat.f_flag & os.ST_NOEXEC:
        return None
    return SHM
