"""Dashboard sessions under attack: user-name enumeration, password guessing, sessions
that outlive their account or their lifetime, and cross-site requests (CSRF).

The role matrix is tests/web/test_access.py; the happy paths of login, logout and the
cookie's flags are tests/web/test_pages.py.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlalchemy import delete, func, select

from app.settings import Settings
from app.store import users
from app.store.db import transaction
from app.store.limits import Limits, failure_key, forgive, take_attempt
from app.store.models import LoginLimitRow
from app.store.users import disable_user
from app.web import sessions
from app.web.app import create_app
from tests.conftest import World
from tests.web.accounts import ACCOUNTS, PASSWORD, Login, create_accounts, log_in
from tests.web.conftest import Clock, write_trust

HELD = 1_800_000_000  # the login limits' clock in these tests
OWN = "http://testserver"  # the TestClient's origin
EVIL = "https://evil.example"


@dataclass
class Served:
    app: FastAPI
    client: TestClient
    settings: Settings

    @property
    def engine(self) -> Any:
        return self.app.state.service.engine

    def login(self, username: str, password: str, **headers: str) -> Any:
        form = {"username": username, "password": password, "next": "/"}
        try:
            return self.client.post("/login", data=form, headers=headers, follow_redirects=False)
        finally:
            self.client.cookies.clear()

    def post(self, path: str, login: Login, form: dict[str, Any], **headers: str) -> Any:
        return self.client.post(
            path, data=form, headers={**login.headers, **headers}, follow_redirects=False
        )

    def alive(self, login: Login) -> bool:
        response = self.client.get("/trust", headers=login.headers, follow_redirects=False)
        assert response.status_code in (200, 303)
        return response.status_code == 200


@pytest.fixture(scope="module")
def module_served(
    world: World, databases: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Served]:
    trust = write_trust(world, tmp_path_factory.mktemp("sessions") / "trust.json")
    settings = Settings(
        database_url=databases.new("sqlite"),
        trust_file=trust,
        session_seconds=1800,
        login_failures_per_name=3,
        login_failures_per_address=5,
    )
    app = create_app(settings, clock=Clock())
    with TestClient(app, raise_server_exceptions=True) as client:
        served = Served(app, client, settings)
        create_accounts(served.engine)
        yield served


@pytest.fixture
def served(module_served: Served, monkeypatch: pytest.MonkeyPatch) -> Served:
    with transaction(module_served.engine) as session:  # each test starts with no failures
        session.execute(delete(LoginLimitRow))
    # The limits' clock held still: a delay never runs out while argon2 works on a busy
    # machine, and the waits it answers are exact.
    monkeypatch.setattr(sessions, "wall_clock", lambda: HELD)
    return module_served


# --- no user-name enumeration ----------------------------------------------------------


def test_unknown_name_wrong_password_and_disabled_account_answer_alike(served: Served) -> None:
    with transaction(served.engine) as session:
        users.create_user(session, username="gone", role=users.Role.READ, password=PASSWORD, now=1)
        disable_user(session, username="gone", now=2)
    answers = {
        "unknown": served.login("nobody", PASSWORD),
        "wrong": served.login("otto", PASSWORD + "!"),
        "disabled": served.login("gone", PASSWORD),
    }
    bodies = {
        k: r.text.replace(f'value="{n}"', 'value="NAME"')
        for (k, r), n in zip(answers.items(), ("nobody", "otto", "gone"), strict=True)
    }
    assert {r.status_code for r in answers.values()} == {401}
    assert len(set(bodies.values())) == 1, "the three refusals differ beyond the echoed name"
    assert "Wrong user name or password." in bodies["unknown"]
    for response in answers.values():
        assert "set-cookie" not in response.headers


class CountingHasher:
    """The module's PasswordHasher, counting verifications and the hashes they used."""

    def __init__(self, real: Any) -> None:
        self.real = real
        self.verified: list[str] = []

    def verify(self, hash: str, password: str) -> bool:
        self.verified.append(hash)
        return bool(self.real.verify(hash, password))


def test_an_unknown_name_costs_the_same_argon2_work(
    served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    with transaction(served.engine) as session:  # an account that logs in only by SSO
        users.sso_user(
            session, issuer="https://idp.example", subject="s-1", label="sso-sam",
            role=users.Role.READ, now=1,
        )  # fmt: skip
    counting = CountingHasher(users._hasher)
    monkeypatch.setattr(users, "_hasher", counting)
    served.login("nobody", "whatever it is here")
    served.login("x" * 100, "a name too long to look up")
    served.login("sso-sam", "an SSO account has no password")
    served.login("otto", "not the password!!")
    dummy, too_long, sso, real = counting.verified
    # One verification each, the unknown and SSO-only names' against the dummy hash...
    assert dummy == too_long == sso == users._DUMMY_HASH != real
    # ...made with the same argon2id parameters as a real one, so it takes as long.
    assert dummy.rsplit("$", 2)[0] == real.rsplit("$", 2)[0]
    assert real.startswith("$argon2id$")


# --- password guessing -------------------------------------------------------------------


def test_guessing_one_name_is_stopped_even_with_the_right_password(served: Served) -> None:
    limit = served.settings.login_failures_per_name
    for _ in range(limit):
        assert served.login("otto", "not the password!!").status_code == 401
    blocked = served.login("otto", PASSWORD)
    assert blocked.status_code == 429 and "Too many failed logins" in blocked.text
    wait = int(blocked.headers["retry-after"])
    assert 0 < wait <= served.settings.login_window_seconds
    assert f"Try again in {wait} s." in blocked.text
    assert "set-cookie" not in blocked.headers
    # Another name from the same address is still served (the address limit is higher).
    assert served.login("rita", PASSWORD).status_code == 303


def test_an_unknown_name_is_limited_exactly_like_a_real_one(served: Served) -> None:
    limit = served.settings.login_failures_per_name
    answers = {}
    for name in ("otto", "nobody"):
        for _ in range(limit):
            served.login(name, "not the password!!")
        answers[name] = served.login(name, "not the password!!")
    assert answers["otto"].status_code == answers["nobody"].status_code == 429
    # Alike but for the echoed name and the seconds left (the clock moved in between).
    otto, nobody = (re.sub(r"in \d+ s", "in N s", answers[n].text) for n in ("otto", "nobody"))
    assert otto.replace("otto", "nobody") == nobody


def test_guessing_across_names_is_stopped_per_address(served: Served) -> None:
    limit = served.settings.login_failures_per_address
    for i in range(limit):
        assert served.login(f"name{i}", "not the password!!").status_code == 401
    assert served.login("rita", PASSWORD).status_code == 429


LIMITS = Limits(address_limit=3, window=300, free=2, cap=300)


def test_delays_double_and_attempts_leave_the_window(engine: Any) -> None:
    address, otto = failure_key("address", "a"), failure_key("name", "otto\0a")

    def take(now: int, name: str = otto) -> int:
        with transaction(engine) as session:
            return take_attempt(session, address_key=address, name_key=name, limits=LIMITS, now=now)

    assert take(1000) == 0
    assert take(1000) == 0  # the second failure in a row starts the delays: 15 s
    assert take(1001) == 14
    assert take(1015) == 0  # the address's third attempt: its window is now full
    assert take(1016, failure_key("name", "rita\0a")) == 284  # until 1300
    assert take(1300, failure_key("name", "rita\0a")) == 0  # a new window
    assert take(1300) == 0  # otto's delay had doubled to 30 s, from 1015: over
    assert take(1300) == 60
    with transaction(engine) as session:
        forgive(session, address_key=address, name_key=otto, now=1300, limits=LIMITS)
        assert (
            session.execute(
                select(LoginLimitRow.count).where(LoginLimitRow.key == address)
            ).scalar()
            == 1
        )
        assert session.get(LoginLimitRow, otto) is None
        forgive(session, address_key=address, name_key=otto, now=2000, limits=LIMITS)
        assert session.execute(select(func.count()).select_from(LoginLimitRow)).scalar() == 0


# --- sessions end ------------------------------------------------------------------------


def test_a_session_lasts_the_configured_time(served: Served) -> None:
    response = served.client.post(
        "/login",
        data={"username": "rita", "password": PASSWORD, "next": "/"},
        follow_redirects=False,
    )
    served.client.cookies.clear()
    assert response.status_code == 303
    assert "max-age=1800" in response.headers["set-cookie"].lower()
    lifetime = served.settings.session_seconds
    fresh = log_in(served.engine, "rita", now=int(time.time()) - lifetime + 60, lifetime=lifetime)
    spent = log_in(served.engine, "rita", now=int(time.time()) - lifetime - 1, lifetime=lifetime)
    assert served.alive(fresh)
    assert not served.alive(spent)


def test_disabling_an_account_ends_its_sessions_at_once(served: Served) -> None:
    with transaction(served.engine) as session:
        users.create_user(
            session, username="leaver", role=users.Role.ADMIN, password=PASSWORD, now=1
        )
    login = log_in(served.engine, "leaver")
    assert served.alive(login)
    with transaction(served.engine) as session:
        assert disable_user(session, username="leaver", now=int(time.time())) == 1
    assert not served.alive(login)
    # Its CSRF token is worth nothing now either.
    response = served.post("/flags/bulk", login, {"csrf": login.csrf, "ids": "1"})
    assert response.status_code == 303 and response.headers["location"].startswith("/login?")


# --- cross-site requests -----------------------------------------------------------------

# (what the attacker's request looks like, headers, which CSRF token it sends)
FORGERIES = [
    ("cross-site form post", {"Origin": EVIL}, "none"),
    ("cross-site post that guessed the token", {"Origin": EVIL}, "own"),
    ("sandboxed frame (Origin: null)", {"Origin": "null"}, "own"),
    ("no Origin, foreign Referer", {"Referer": f"{EVIL}/page"}, "own"),
    ("no Origin, look-alike Referer", {"Referer": f"{OWN}.evil.example/"}, "own"),
    ("htmx request without a token", {"HX-Request": "true"}, "none"),
    ("htmx request with a wrong token", {"HX-Request": "true", "X-CSRF-Token": "x" * 43}, "none"),
    ("token of another session of the same user", {}, "same-user"),
    ("token of another user's session", {}, "other-user"),
]


def _token(served: Served, login: Login, which: str) -> str | None:
    if which == "own":
        return login.csrf
    if which == "same-user":
        return log_in(served.engine, "otto").csrf
    if which == "other-user":
        return log_in(served.engine, "ada").csrf
    return None


@pytest.mark.parametrize(("what", "headers", "which"), FORGERIES, ids=[f[0] for f in FORGERIES])
@pytest.mark.parametrize("path", ["/logout", "/flags/bulk"])
def test_a_forged_request_is_refused_and_changes_nothing(
    served: Served, path: str, what: str, headers: dict[str, str], which: str
) -> None:
    login = log_in(served.engine, "otto")
    token = _token(served, login, which)
    assert token != login.csrf or which == "own"
    form: dict[str, Any] = {"ids": "1", "action": "acknowledge", "note": "forged"}
    if token is not None:
        form["csrf"] = token
    response = served.post(path, login, form, **headers)
    assert response.status_code == 403, what
    assert "came from another site" in response.text
    assert served.alive(login), "the forged logout ended the session"


@pytest.mark.parametrize(
    "headers",
    [{}, {"Origin": OWN}, {"Referer": f"{OWN}/flags"}, {"HX-Request": "true"}],
    ids=["no Origin or Referer", "own Origin", "own Referer", "htmx"],
)
def test_the_sessions_own_token_from_this_site_gets_through(
    served: Served, headers: dict[str, str]
) -> None:
    login = log_in(served.engine, "otto")
    sent = {**headers}
    form: dict[str, Any] = {}
    if "HX-Request" in headers:
        sent["X-CSRF-Token"] = login.csrf
    else:
        form["csrf"] = login.csrf
    response = served.post("/logout", login, form, **sent)
    assert (response.status_code, response.headers["location"]) == (303, "/login")
    assert not served.alive(login)


def test_each_session_has_its_own_token(served: Served) -> None:
    tokens = {log_in(served.engine, name).csrf for name in (*ACCOUNTS.values(), "otto")}
    assert len(tokens) == len(ACCOUNTS) + 1


@pytest.mark.parametrize(
    "headers",
    [{"Origin": EVIL}, {"Origin": "null"}, {"Referer": f"{EVIL}/login"}],
    ids=["foreign Origin", "null Origin", "foreign Referer"],
)
def test_a_login_posted_from_another_site_is_refused(
    served: Served, headers: dict[str, str]
) -> None:
    """Login CSRF: a foreign page must not log the victim in to the attacker's account."""
    response = served.login("otto", PASSWORD, **headers)
    assert response.status_code == 403 and "This form came from another site." in response.text
    assert "set-cookie" not in response.headers
