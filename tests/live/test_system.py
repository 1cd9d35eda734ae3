"""The real system test (issue: live feed from running agents).

An a2a-sdk client, streaming and not, talks to an a2a-sdk planner that delegates to an
a2a-sdk coder and to an mcp Streamable HTTP tool; the traffic reaches a real ``handoff-trace
serve`` on loopback three ways: the library's middleware and hooks, ``handoff-trace tap``
in front of every server, and a HAR capture uploaded afterwards. Every hop reaches its
scripted state, no flag appears beyond the lost outcome, and all three ways agree.
"""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from .service import service
from .system import CLIENT, CODER, PLANNER, TOOL, TRUST, Wiring, run_system, settled, shape

# Short enough that the lost outcome shows within the test; every other hop ends first.
ENV = {"HANDOFF_TRACE_LOST_OUTCOME_AFTER": "3", "HANDOFF_TRACE_CANCEL_GRACE": "30"}

EXPECTED = sorted(
    [
        (CLIENT.iss, PLANNER.iss, "completed", ()),
        (PLANNER.iss, CODER.iss, "completed", ()),
        (PLANNER.iss, TOOL.iss, "completed", ()),
        (CLIENT.iss, PLANNER.iss, "failed", ()),
        (CLIENT.iss, PLANNER.iss, "canceled", ()),
        (PLANNER.iss, CODER.iss, "canceled", ()),
        (CLIENT.iss, PLANNER.iss, "accepted", ("lost-outcome",)),
    ]
)


def run_wired(mode: str, work: Path) -> list[tuple[str, str, str, tuple[str, ...]]]:
    work.mkdir()
    with service(work, TRUST, **ENV) as svc:
        wiring = Wiring(mode, svc, work)
        run_system(wiring)
        if mode == "middleware":
            assert all(r.stats.dropped == r.stats.errors == 0 for r in wiring.reporters.values())
        if mode == "har":
            answer = httpx.post(
                f"{svc.url}/api/v1/ingest",
                content=json.dumps(wiring.recorder.har()).encode(),
                headers={
                    "Authorization": f"Bearer {svc.token}",
                    "Content-Type": "application/har+json",
                },
                timeout=60,
            )
            assert answer.status_code == 200, answer.text
            assert answer.json()["counts"]["reject"] == 0
        return shape(settled(svc, len(EXPECTED)))


@pytest.mark.parametrize("mode", ["middleware", "tap", "har"])
def test_every_hop_reaches_its_scripted_state_and_no_other_flag(mode: str, tmp_path: Path) -> None:
    assert run_wired(mode, tmp_path / mode) == EXPECTED
