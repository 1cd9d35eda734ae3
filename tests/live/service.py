"""A real ``handoff-trace serve`` (and ``handoff-trace tap``) as subprocesses on loopback."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

from .servers import free_port, wait_until

CLI = str(Path(sys.executable).parent / "handoff-trace")


def make_token(db: str, role: str = "admin") -> str:
    done = subprocess.run(
        [CLI, "tokens", "create", "--role", role, "--name", f"live-{role}", "--db", db],
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.strip().splitlines()[-1]


class Service:
    """``handoff-trace serve`` on a fixed loopback port, which can be killed and started
    again on the same port and database (the crash test)."""

    def __init__(self, work: Path, trust: dict[str, Any], **env: str) -> None:
        self.work = work
        self.db = f"sqlite:///{work / 'trace.db'}"
        self.trust = work / "trust.json"
        self.trust.write_text(json.dumps(trust))
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = {**os.environ, **env}
        self.token = make_token(self.db)
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    def start(self) -> None:
        self.starts += 1
        log = (self.work / f"serve-{self.starts}.log").open("wb")
        with log:
            self.proc = subprocess.Popen(
                [
                    *(CLI, "serve", "--host", "127.0.0.1", "--port", str(self.port)),
                    *("--db", self.db, "--trust", str(self.trust)),
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self.env,
                start_new_session=True,
            )
        wait_until(self._ready, what="handoff-trace serve", timeout=60)

    def _ready(self) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise RuntimeError(f"serve exited: {self.log_tail()}")
        try:
            return httpx.get(f"{self.url}/api/v1/readyz", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    def log_tail(self) -> str:
        return (self.work / f"serve-{self.starts}.log").read_text()[-3000:]

    def kill(self) -> None:
        """SIGKILL: a crash, no clean shutdown."""
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(30)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.kill()

    def get(self, path: str, **params: Any) -> Any:
        headers = {"Authorization": f"Bearer {self.token}"}
        answer = httpx.get(f"{self.url}/api/v1{path}", params=params, headers=headers, timeout=30)
        answer.raise_for_status()
        return answer.json()

    def hops(self) -> list[dict[str, Any]]:
        return list(self.get("/hops", limit=500)["hops"])


@contextmanager
def service(work: Path, trust: dict[str, Any], **env: str) -> Iterator[Service]:
    s = Service(work, trust, **env)
    s.start()
    try:
        yield s
    finally:
        s.stop()


@contextmanager
def tap(
    upstream: str, *, receiver: str, svc: Service, log: Path, extra: tuple[str, ...] = ()
) -> Iterator[str]:
    """``handoff-trace tap`` in front of ``upstream`` (``extra``: more of its options);
    yields its URL."""
    port = free_port()
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [
                *(CLI, "tap", "--listen", f"127.0.0.1:{port}", "--upstream", upstream),
                *("--receiver", receiver, "--service", svc.url),
                *extra,
            ],
            env={**os.environ, "HANDOFF_TRACE_TOKEN": svc.token},
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    url = f"http://127.0.0.1:{port}"

    def ready() -> bool:
        if proc.poll() is not None:
            raise RuntimeError(f"tap exited: {log.read_text()[-2000:]}")
        try:
            httpx.get(url + "/.well-known/agent-card.json", timeout=2)
            return True
        except httpx.HTTPError:
            return False

    try:
        wait_until(ready, what="handoff-trace tap", timeout=60)
        yield url
    finally:
        # SIGTERM: uvicorn shuts down and the tap's reporter flushes what it holds.
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(30)
