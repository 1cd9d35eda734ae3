"""Shutdown test (issue 19, "Restart and shutdown"): SIGTERM to an agent under uvicorn
while the service is down, then the service and the agent started again: every
observation made before the SIGTERM reaches the service, none twice.

The agent (tests/live/spool_agent.py) has no shutdown code: its reporter chains a SIGTERM
handler in front of uvicorn's, closes, says what it could not deliver and spools it
(``HANDOFF_REPORTER_SPOOL``); the next start sends the spool first.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx

from .servers import free_port, wait_until
from .service import Service
from .system import TRUST
from .test_crash import counts, send

REPO = Path(__file__).resolve().parents[2]


class Agent:
    def __init__(self, work: Path, svc: Service) -> None:
        self.work, self.port, self.starts = work, free_port(), 0
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = {
            **os.environ,
            "SPOOL_AGENT_SERVICE": svc.url,
            "SPOOL_AGENT_TOKEN": svc.token,
            "HANDOFF_REPORTER_SPOOL": str(work / "agent.spool"),
        }
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def log(self) -> Path:
        return self.work / f"agent-{self.starts}.log"

    def start(self) -> None:
        self.starts += 1
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(
                [
                    *(sys.executable, "-m", "uvicorn", "tests.live.spool_agent:app"),
                    *("--host", "127.0.0.1", "--port", str(self.port), "--log-level", "info"),
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=REPO,
                env=self.env,
            )

        def ready() -> bool:
            assert self.proc is not None and self.proc.poll() is None, self.log.read_text()
            try:
                return httpx.get(f"{self.url}/", timeout=2).status_code == 404
            except httpx.HTTPError:
                return False

        wait_until(ready, what="the agent under uvicorn", timeout=60, interval=0.1)

    def observe(self, message: dict[str, object]) -> None:
        httpx.post(f"{self.url}/observe", json=message, timeout=30).raise_for_status()

    def terminate(self) -> int:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(60)


def stored(svc: Service, n: int, what: str) -> None:
    wait_until(lambda: counts(svc.db)[0] >= n, what=what, timeout=60, interval=0.2)


def test_sigterm_with_the_service_down_loses_nothing(tmp_path: Path) -> None:
    svc = Service(tmp_path, TRUST)
    svc.start()
    agent = Agent(tmp_path, svc)
    try:
        agent.start()
        for n in range(5):
            agent.observe(send(n, "shutdown-1"))
        wait_until(
            lambda: counts(svc.db)[0] == 5, what="the first five stored", timeout=60, interval=0.2
        )

        svc.stop()
        for n in range(5, 12):
            agent.observe(send(n, "shutdown-2"))
        # Ended by the signal, as uvicorn ends after a SIGTERM; the reporter closed first.
        assert agent.terminate() in (0, -signal.SIGTERM)
        said = agent.log.read_text()
        assert "could not deliver 7 observations" in said and "spooled to" in said, said
        assert len((tmp_path / "agent.spool").read_bytes().splitlines()) == 7

        svc.start()
        agent.start()  # sends the spool at start, before anything new
        wait_until(
            lambda: counts(svc.db)[0] >= 12, what="the spooled seven", timeout=60, interval=0.2
        )
        agent.observe(send(12, "shutdown-3"))
        wait_until(
            lambda: counts(svc.db)[0] >= 13, what="a new one after them", timeout=60, interval=0.2
        )
    finally:
        if agent.proc is not None and agent.proc.poll() is None:
            agent.terminate()
        svc.stop()
    observations, distinct, _ = counts(svc.db)
    assert observations == distinct == 13  # every one, none twice
    assert (tmp_path / "agent.spool").read_bytes() == b""
