"""Login limits under concurrency and as a lever against others (issue #25).

- 24 guesses at one name sent at once, half to each of two instances of the service on one
  database (both databases): each attempt is counted before its password is checked, so
  exactly ``LOGIN_FAILURES_PER_NAME`` of them reach argon2 and the rest get 429.
- Failing on purpose from one address never keeps the same name from logging in from
  another: the per-name delays are per address; the per-address limit bounds how many
  guesses one address makes.
"""

from __future__ import annotations

import threading
from collections import Counter
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.settings import Settings
from app.web import sessions
from app.web.app import create_app
from tests.conftest import World
from tests.web.accounts import PASSWORD, create_accounts
from tests.web.conftest import Clock, write_trust

GUESSES = 24
FREE = 5
HELD = 1_800_000_000


@pytest.fixture
def held(monkeypatch: pytest.MonkeyPatch) -> None:
    # The limits' clock held still: no delay runs out while the guesses are in flight.
    monkeypatch.setattr(sessions, "wall_clock", lambda: HELD)


def _instances(url: str, trust: Path, stack: ExitStack, n: int) -> list[TestClient]:
    """``n`` instances of the service on one database, each its own app and engine."""
    settings = Settings(database_url=url, trust_file=trust, login_failures_per_name=FREE)
    return [stack.enter_context(TestClient(create_app(settings, clock=Clock()))) for _ in range(n)]


def _login(client: TestClient, name: str, password: str) -> int:
    form = {"username": name, "password": password, "next": "/"}
    return int(client.post("/login", data=form, follow_redirects=False).status_code)


@pytest.fixture
def trust(world: World, tmp_path: Path) -> Path:
    return write_trust(world, tmp_path / "trust.json")


def test_parallel_guesses_on_two_instances_are_all_counted(
    db_url: str, trust: Path, held: None
) -> None:
    with ExitStack() as stack:
        clients = _instances(db_url, trust, stack, 2)
        create_accounts(clients[0].app.state.service.engine)  # type: ignore[attr-defined]
        for client in clients:
            # One request first on each instance: pydantic builds a route's validators on
            # its first call, and two threads doing that at once can trip over each other
            # (a warning, an error under -W error). A foreign Origin is refused before the
            # limits count anything.
            warm = client.post("/login", data={"username": "otto"}, headers={"Origin": "x"})
            assert warm.status_code == 403
        answers: list[int] = []
        lock = threading.Lock()
        start = threading.Barrier(GUESSES)

        def guess(i: int) -> None:
            start.wait()
            status = _login(clients[i % 2], "otto", f"guess number {i:04d}")
            with lock:
                answers.append(status)

        threads = [threading.Thread(target=guess, args=(i,)) for i in range(GUESSES)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert Counter(answers) == {401: FREE, 429: GUESSES - FREE}
        # The right password is refused too while the delay runs: a guesser learns nothing.
        assert _login(clients[0], "otto", PASSWORD) == 429


def test_failing_on_purpose_elsewhere_does_not_keep_a_person_out(
    databases: Any, trust: Path, held: None
) -> None:
    url = databases.new("sqlite")
    settings = Settings(database_url=url, trust_file=trust, login_failures_per_name=FREE)
    app = create_app(settings, clock=Clock())
    with (
        TestClient(app, client=("203.0.113.9", 40000)) as attacker,
        TestClient(app, client=("198.51.100.7", 40000)) as person,
    ):
        create_accounts(app.state.service.engine)
        statuses = [_login(attacker, "otto", f"wrong password {i:02d}") for i in range(FREE + 3)]
        assert statuses == [401] * FREE + [429] * 3
        assert _login(person, "otto", PASSWORD) == 303
        # And the attacker's address is still held back for that name.
        assert _login(attacker, "otto", PASSWORD) == 429


def test_the_address_limit_stops_guessing_across_names(
    databases: Any, trust: Path, held: None
) -> None:
    url = databases.new("sqlite")
    settings = Settings(database_url=url, trust_file=trust, login_failures_per_address=4)
    app = create_app(settings, clock=Clock())
    with TestClient(app) as client, TestClient(app, client=("198.51.100.7", 1)) as other:
        create_accounts(app.state.service.engine)
        statuses = [_login(client, f"name{i}", "wrong password!!") for i in range(6)]
        assert statuses == [401] * 4 + [429] * 2
        assert _login(other, "rita", PASSWORD) == 303
