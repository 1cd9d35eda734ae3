"""A throwaway PostgreSQL cluster for the test run: initdb/pg_ctl as the ``postgres``
user, temp dir, free port on 127.0.0.1, fsync off; ~2 s for the whole cycle.

``start()`` returns a running ``Cluster``; ``Cluster.stop()`` stops it and removes its
directory, and is also registered with ``atexit`` so an aborted run leaves nothing behind.
"""

from __future__ import annotations

import atexit
import glob
import os
import shutil
import socket
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import psycopg

from tests.ramdisk import GIB, ram_disk

NO_PG_ENV = "HANDOFF_TRACE_NO_PG"


def find_bin() -> Path | None:
    """The newest installed server's bin directory, or None."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=_version)
    return Path(found[-1]).parent if found else None


def _version(path: str) -> tuple[int, ...]:
    part = Path(path).parent.parent.name
    return tuple(int(x) for x in part.split(".") if x.isdigit())


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _as_postgres(args: list[str]) -> list[str]:
    # initdb refuses to run as root; as any other user it runs as that user.
    return ["runuser", "-u", "postgres", "--", *args] if os.geteuid() == 0 else args


@dataclass
class Cluster:
    bin: Path
    root: Path
    port: int
    _stopped: bool = field(default=False, repr=False)

    @property
    def data(self) -> Path:
        return self.root / "data"

    def url(self, dbname: str) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{dbname}"

    def _admin(self) -> psycopg.Connection:
        return psycopg.connect(
            host="127.0.0.1", port=self.port, user="postgres", dbname="postgres", autocommit=True
        )

    def create_database(self, name: str, *, template: str | None = None) -> str:
        """CREATE DATABASE (from ``template`` when given); returns its URL."""
        sql = f'CREATE DATABASE "{name}"'
        if template is not None:
            sql += f' TEMPLATE "{template}"'
            # PostgreSQL 15's default strategy (WAL_LOG) writes the whole template through
            # the WAL, doubling what every test database costs to make and to remove; the
            # copy of files is what earlier servers did (fsync is off: its checkpoints are
            # cheap).
            if _version(str(self.bin / "initdb")) >= (15,):
                sql += " STRATEGY FILE_COPY"
        with self._admin() as conn:
            conn.execute(sql)  # type: ignore[arg-type]
        return self.url(name)

    @property
    def options(self) -> str:
        """The server's command-line options (``pg_ctl -o``)."""
        return (
            f"-c listen_addresses=127.0.0.1 -p {self.port} -k {self.root} -c fsync=off "
            "-c synchronous_commit=off -c full_page_writes=off -c max_connections=100"
        )

    def crash(self) -> None:
        """``pg_ctl -m immediate stop``: the server goes away as in a crash (a fault drill);
        ``start_again`` brings it back on the same port and data."""
        _run([str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "-w", "stop"])

    def start_again(self) -> None:
        _run(
            [
                *(str(self.bin / "pg_ctl"), "-D", str(self.data), "-l", str(self.root / "log")),
                *("-w", "-o", self.options, "start"),
            ]
        )

    def admin(self) -> psycopg.Connection:
        """An autocommit connection to the ``postgres`` database as the superuser."""
        return self._admin()

    def stop(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        subprocess.run(
            _as_postgres(
                [str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "-w", "stop"]
            ),
            capture_output=True,
            check=False,
        )
        shutil.rmtree(self.root, ignore_errors=True)


def start(bin_dir: Path, *, in_memory: bool = False) -> Cluster:
    """initdb + pg_ctl start on a free port. Raises RuntimeError with the server's log.

    ``in_memory`` puts the cluster on /dev/shm (a tmpfs) where there is one with room
    (``tests.ramdisk``): the test
    suite's cluster holds a few hundred throwaway databases, which are quicker to make and
    to remove there (fsync is off anyway, so a disk adds no durability; a killed server's
    files survive on a tmpfs as on a disk). Benchmarks keep the default, a disk.
    """
    here = ram_disk(min_free=8 * GIB) if in_memory else None
    root = Path(tempfile.mkdtemp(prefix="handoff-trace-pg-", dir=here))
    if os.geteuid() == 0:
        shutil.chown(root, user="postgres", group="postgres")
    cluster = Cluster(bin=bin_dir, root=root, port=_free_port())
    atexit.register(cluster.stop)
    try:
        _run(
            [
                str(bin_dir / "initdb"),
                "-D",
                str(cluster.data),
                "-U",
                "postgres",
                "--auth=trust",
                "--encoding=UTF8",
                "--locale=C.UTF-8",
                "-N",
            ]
        )
        options = cluster.options
        _run(
            [
                str(bin_dir / "pg_ctl"),
                "-D",
                str(cluster.data),
                "-l",
                str(root / "log"),
                "-w",
                "-o",
                options,
                "start",
            ]
        )
    except RuntimeError:
        log = root / "log"
        detail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
        cluster.stop()
        raise RuntimeError(f"could not start PostgreSQL: {detail}") from None
    return cluster


def _run(args: list[str]) -> None:
    done = subprocess.run(_as_postgres(args), capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{Path(args[0]).name} failed: {done.stderr.strip()[-2000:]}")
