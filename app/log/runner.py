"""The evidence log as the running service holds it: the sequencer every
``HANDOFF_TRACE_LOG_SECONDS`` and the self-check every ``HANDOFF_TRACE_LOG_CHECK_SECONDS``,
each in a worker thread, beside ingest."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

import anyio.to_thread
from sqlalchemy import Engine

from app.log.note import Signer
from app.log.selfcheck import CheckReport, self_check
from app.log.sequencer import BATCH, Appended, sequence_once

log = logging.getLogger("handoff_trace.log")


@dataclass
class EvidenceLog:
    engine: Engine
    signer: Signer
    seconds: int = 2
    check_seconds: int = 3600
    clock: Callable[[], int] = lambda: int(time.time())

    def sequence(self) -> Appended:
        return sequence_once(self.engine, self.signer, now=self.clock())

    def check(self) -> CheckReport:
        report = self_check(self.engine, self.signer.verifier, now=self.clock())
        for finding in report.findings:
            log.critical("evidence log self-check: %s", finding.line())
        return report


async def log_forever(evidence: EvidenceLog) -> None:
    """Sequence now and every ``seconds`` (at once again while a round was full), and check
    the store every ``check_seconds``; a failing round is logged and tried again."""
    last_check = time.monotonic()
    while True:
        full = False
        try:
            done = await anyio.to_thread.run_sync(evidence.sequence)
            if done.count:
                log.info("evidence log: %d leaves appended, size %d", done.count, done.size)
            full = done.count >= BATCH  # a backlog (a store older than its log): go on
        except Exception:
            log.exception("the evidence log sequencer failed; trying again")
        if time.monotonic() - last_check >= evidence.check_seconds:
            last_check = time.monotonic()
            try:
                await anyio.to_thread.run_sync(evidence.check)
            except Exception:
                log.exception("the evidence log self-check failed; trying again")
        await asyncio.sleep(0 if full else evidence.seconds)
