"""The example system (examples/agents/, issue 19 item 9): one command starts a planner, a
coder and an MCP tool as processes of their own, runs three jobs through them and stops
them; a real ``handoff-trace serve`` shows every hop in its final state with no flag. The
launcher adds the agents' keys to the service's trust file, which the service reloads."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from handoff_context import Signer, trust_document

from .servers import wait_until
from .service import service

RUN = Path(__file__).resolve().parents[2] / "examples" / "agents" / "run.py"
EXPECTED = {"complete": "completed", "fail": "failed", "wait": "canceled"}


def test_the_example_runs_with_one_command_and_reports_every_hop(tmp_path: Path) -> None:
    # The service starts with a trust file that does not know the example's agents yet.
    first = trust_document([Signer.generate("spiffe://example.org/agent/nobody")])
    with service(tmp_path, first) as svc:
        done = subprocess.run(
            [
                *(sys.executable, str(RUN), "--service", svc.url),
                *("--service-trust", str(svc.trust), "--db", svc.db),
                *("--dir", str(tmp_path / "example")),
            ],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert done.returncode == 0, done.stdout + done.stderr
        said = dict(re.findall(r"^\s+(\w+)\s+-> (\w+)\s+dialog", done.stdout, re.M))
        assert said == EXPECTED, done.stdout
        run = re.search(r"dialog example-(\w+)-complete", done.stdout)
        assert run is not None
        for job, state in EXPECTED.items():
            wait_until(
                lambda job=job, state=state: settled(svc, f"example-{run[1]}-{job}", state),
                what=f"the {job} job's hops settled with no flag",
                timeout=60,
            )


def settled(svc: Any, dialog: str, state: str) -> bool:
    """Every hop of the job's dialog in ``state`` with no flag: the user's to the planner,
    the planner's to the coder and, for the completed job, to the tool."""
    hops: list[dict[str, Any]] = svc.get("/hops", dialog=dialog)["hops"]
    wanted = 3 if state == "completed" else 2
    return len(hops) == wanted and all(h["state"] == state and h["flags"] == [] for h in hops)
