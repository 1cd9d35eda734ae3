"""Browser tests: the dashboard served by uvicorn on a loopback port, driven by Playwright
through Debian's Chromium (``/usr/bin/chromium``; ``make test`` installs it with apt when
missing; never ``playwright install``, which downloads a browser of its own).

The store is a small demo run plus hostile traffic (tests/web/dashboard_data.py). The
service's clock is pinned to the run's suggested "now", so time-based flags are there.
Screenshots of each main page (1440x900) go to ``test-artifacts/screenshots/`` (or
``$HANDOFF_TRACE_ARTIFACTS``).
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from app.settings import Settings
from app.store import db
from app.store.tokens import Role
from app.store.users import create_user
from app.web.app import create_app
from tests.web.dashboard_data import Dataset, copy

CHROMIUM = Path(os.environ.get("HANDOFF_TRACE_CHROMIUM", "/usr/bin/chromium"))
NO_BROWSER_ENV = "HANDOFF_TRACE_NO_BROWSER"
# Headless, and nothing that reaches beyond loopback (Chromium phones home otherwise).
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
PASSWORD = "a long enough password"
REPO = Path(__file__).resolve().parents[2]
ARTIFACTS = Path(os.environ.get("HANDOFF_TRACE_ARTIFACTS", REPO / "test-artifacts")) / "screenshots"
VIEWPORT = {"width": 1440, "height": 900}


@dataclass
class Served:
    base: str
    data: Dataset


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory, dashboard_data: Dataset) -> Iterator[Served]:
    data = copy(dashboard_data, tmp_path_factory.mktemp("browser"))
    with serve_store(data.db, data.trust, data.now) as base:
        yield Served(base, data)


@contextlib.contextmanager
def serve_store(store: Path, trust: Path, now: int, **settings: Any) -> Iterator[str]:
    """Serve the SQLite file ``store`` (clock pinned to ``now``; ``settings`` added) with
    the accounts ``otto`` (operator) and ``ada`` (admin) added; yields the base URL."""
    import uvicorn

    url = f"sqlite:///{store}"
    engine = db.make_engine(url)
    try:
        with db.transaction(engine) as session:
            create_user(session, username="otto", role=Role.OPERATOR, password=PASSWORD, now=now)
            create_user(session, username="ada", role=Role.ADMIN, password=PASSWORD, now=now)
    finally:
        engine.dispose()
    app = create_app(Settings(database_url=url, trust_file=trust, **settings), clock=lambda: now)
    port = _free_port()
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            pytest.fail("the dashboard did not start")
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


# Module scope, not session: Playwright's sync API keeps an asyncio loop running on the
# main thread while it is open, and tests elsewhere call asyncio.run.
@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if not CHROMIUM.exists():
        if os.environ.get(NO_BROWSER_ENV) == "1":
            pytest.skip(f"no Chromium at {CHROMIUM} ({NO_BROWSER_ENV}=1)")
        pytest.fail(
            f"no Chromium at {CHROMIUM}: install it (apt-get install -y chromium; `make test` "
            f"does) or set {NO_BROWSER_ENV}=1 to skip the browser tests",
            pytrace=False,
        )
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            yield chromium
        finally:
            chromium.close()


@dataclass
class Tab:
    """A logged-in page and what the browser said while the test ran."""

    page: Any
    base: str
    data: Dataset
    console: list[str] = field(default_factory=list)
    dialogs: list[str] = field(default_factory=list)

    def go(self, path: str) -> Any:
        response = self.page.goto(self.base + path)
        self.page.wait_for_load_state("networkidle")
        return response

    def shot(self, name: str) -> Path:
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        path = ARTIFACTS / f"{name}.png"
        self.page.screenshot(path=str(path))
        return path

    def errors(self) -> list[str]:
        return [m for m in self.console if m.startswith(("error", "pageerror"))]


def open_tab(browser: Any, served: Served, *, user: str | None = "otto", **options: Any) -> Tab:
    options.setdefault("viewport", VIEWPORT)
    context = browser.new_context(accept_downloads=True, **options)
    page = context.new_page()
    tab = Tab(page, served.base, served.data)
    page.on("console", lambda m: tab.console.append(f"{m.type}: {m.text}"))
    page.on("pageerror", lambda e: tab.console.append(f"pageerror: {e}"))

    def on_dialog(dialog: Any) -> None:
        tab.dialogs.append(dialog.message)
        dialog.dismiss()

    page.on("dialog", on_dialog)
    if user is not None:
        tab.go("/login")
        page.fill("input[name=username]", user)
        page.fill("input[name=password]", PASSWORD)
        page.click("button[type=submit]")
        page.wait_for_load_state("networkidle")
    return tab


@pytest.fixture
def tab(browser: Any, served: Served) -> Iterator[Tab]:
    tab = open_tab(browser, served)
    try:
        yield tab
    finally:
        tab.page.context.close()
