"""Schemathesis's command line, ``--checks all``, against a real ``handoff-trace serve``
with data in its store, as read, operator and admin (issue #25): zero failures.

Bounded to about a minute (a few examples per operation, a fixed seed, deterministic
generation); the in-process run of every role is tests/web/test_openapi.py, and the long
random exploration is ``make fuzz``. The settings Schemathesis cannot read from the
document are in ``schemathesis.toml`` beside this file, each with its reason.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.ingest.pipeline import ingest
from app.store.db import make_engine
from tests.conftest import World
from tests.databases import Databases
from tests.store.builders import jsonl, pipeline
from tests.web.conftest import make_tokens, write_trust
from tests.web.test_api import Scenario
from tests.web.test_served import serving

CONFIG = Path(__file__).with_name("schemathesis.toml")
EXAMPLES = "3"


@pytest.fixture(scope="module")
def served(
    databases: Databases, world: World, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, dict[str, str], Path]]:
    tmp = tmp_path_factory.mktemp("schemathesis")
    url = databases.new("sqlite")
    engine = make_engine(url)
    try:
        tokens = make_tokens(engine)
        ingest(pipeline(engine, world.trust), [("seed.jsonl", jsonl(Scenario(world).records))])
    finally:
        engine.dispose()
    trust = write_trust(world, tmp / "trust.json")
    with serving(url, trust, tmp) as base:
        yield base, tokens, tmp


@pytest.mark.parametrize("role", ["read", "operator", "admin"])
def test_checks_all_find_nothing(served: tuple[str, dict[str, str], Path], role: str) -> None:
    base, tokens, tmp = served
    schemathesis = Path(sys.executable).with_name("schemathesis")
    argv = [
        str(schemathesis), "--config-file", str(CONFIG), "run", f"{base}/api/v1/openapi.json",
        "--checks", "all", "--max-examples", EXAMPLES, "--seed", "25",
        "--generation-deterministic", "--workers", "1", "--no-color",
        "-H", f"Authorization: Bearer {tokens[role]}",
    ]  # fmt: skip
    done = subprocess.run(
        argv, capture_output=True, text=True, cwd=tmp, timeout=600,
        env={**os.environ, "SCHEMATHESIS_HOOKS": ""},
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
