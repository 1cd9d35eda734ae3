"""The wheels install anywhere (issue 11, "Installable anywhere").

Once per session the wheels of both distributions are built, from exactly the files the
Dockerfile's build stage copies and with the command it runs, and installed into two plain
virtualenvs: the service's wheel with the library's (what the image's final stage does), and
the library's wheel alone. Then, from a directory that has nothing to do with the checkout,
the installed commands must work: ``--version``, ``db upgrade`` of a new SQLite file,
``serve`` (healthz, the login page and the stylesheets it links to, the Plotly bundle) and
``run-demo`` (a demo run loaded, a login, the overview). The library alone must import, and
its installation must hold none of the service's web and database stack.

Dependencies come from the package index through pip (its cache keeps it quick); nothing is
taken from this test's own environment. Every process started here is stopped, and every
directory made here removed, whatever the outcome.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import shutil
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
import tomllib
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from app.store.db import head_revision
from tests.ramdisk import GIB, ram_disk

REPO = Path(__file__).resolve().parents[1]
DOCKERFILE = REPO / "Dockerfile"
STARTUP_SECONDS = 120  # a loaded two-core machine; the wait ends as soon as healthz answers
BUILD_SECONDS = 900
# The service's stack, which an agent installing only the protocol library must not get.
SERVICE_STACK = ("fastapi", "sqlmodel", "sqlalchemy", "uvicorn", "jinja2", "plotly")


@dataclass(frozen=True)
class Venv:
    root: Path

    def bin(self, name: str) -> str:
        return str(self.root / "bin" / name)


# --- what the image's build stage does ----------------------------------------------------


def _build_stage() -> list[str]:
    """The instructions of the Dockerfile's first stage (the one that makes the wheels)."""
    lines = [line.strip() for line in DOCKERFILE.read_text().splitlines()]
    instructions = [line for line in lines if line and not line.startswith("#")]
    froms = [i for i, line in enumerate(instructions) if line.startswith("FROM ")]
    assert len(froms) == 2, "the Dockerfile should have a build stage and a final stage"
    return instructions[froms[0] : froms[1]]


def _ignored() -> list[str]:
    """Names .dockerignore keeps out of the build context (its ``**/NAME`` and ``NAME``)."""
    lines = (REPO / ".dockerignore").read_text().splitlines()
    return [line.strip().removeprefix("**/") for line in lines if line.strip()[:1] not in "#"]


def copy_build_context(tree: Path) -> None:
    """Copy what the build stage's COPY instructions copy, where they put it (relative to
    its WORKDIR), leaving out what .dockerignore does. Symbolic links are kept as links,
    as Docker keeps them."""
    ignore = shutil.ignore_patterns(*_ignored())
    copies = [shlex.split(line)[1:] for line in _build_stage() if line.startswith("COPY ")]
    assert copies, "the build stage copies nothing"
    for *sources, destination in copies:
        assert not any(s.startswith("--") for s in sources), f"COPY flags unsupported: {sources}"
        into = tree / destination
        for source in sources:
            origin = REPO / source
            target = into / origin.name if len(sources) > 1 or destination.endswith("/") else into
            if origin.is_dir():
                shutil.copytree(origin, target, symlinks=True, ignore=ignore)
            else:
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(origin, target)


def build_command(out: Path) -> list[str]:
    """The build stage's ``RUN pip wheel ...``, with this interpreter's pip and ``out`` as
    the wheel directory."""
    runs = [line for line in _build_stage() if line.startswith("RUN ")]
    assert len(runs) == 1, "the build stage should run one command: pip wheel"
    words = shlex.split(runs[0].removeprefix("RUN "))
    assert words[:2] == ["pip", "wheel"] and "/wheels" in words, runs[0]
    words = [str(out) if word == "/wheels" else word for word in words]
    return [sys.executable, "-m", *words]


# --- processes ----------------------------------------------------------------------------


def clean_environment() -> dict[str, str]:
    """This environment without anything that would point the installed commands back at
    the checkout or at a configured service."""
    dropped = ("DATABASE_URL", "PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "VIRTUAL_ENV")
    return {
        key: value
        for key, value in os.environ.items()
        if key not in dropped and not key.startswith("HANDOFF_TRACE_")
    }


def run(
    command: list[str], *, cwd: Path, env: dict[str, str] | None = None, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        command,
        cwd=cwd,
        env={**clean_environment(), **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if done.returncode != 0:
        pytest.fail(
            f"{shlex.join(command)} exited with {done.returncode}:\n{done.stdout}\n{done.stderr}"
        )
    return done


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def started(command: list[str], *, cwd: Path, port: int, log: Path) -> Iterator[httpx.Client]:
    """Start a serving command and yield a client for it once ``/api/v1/healthz`` answers
    200; the process is stopped (killed if it will not stop) when the block ends."""
    with log.open("wb") as out:
        process = subprocess.Popen(
            command, cwd=cwd, env=clean_environment(), stdout=out, stderr=subprocess.STDOUT
        )
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as client:
            _wait_healthy(process, client, log)
            yield client
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _wait_healthy(process: subprocess.Popen[bytes], client: httpx.Client, log: Path) -> None:
    deadline = time.monotonic() + STARTUP_SECONDS
    while True:
        if process.poll() is not None:
            pytest.fail(f"exited with {process.returncode} before answering:\n{log.read_text()}")
        with contextlib.suppress(httpx.TransportError):
            if client.get("/api/v1/healthz", timeout=2).status_code == 200:
                return
        if time.monotonic() > deadline:
            pytest.fail(f"no answer on healthz in {STARTUP_SECONDS} s:\n{log.read_text()}")
        time.sleep(0.1)  # the poll interval; readiness is the answer itself


# --- session fixtures: the wheels once, the two virtualenvs once --------------------------


@pytest.fixture(scope="session")
def scratch() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(
        prefix="handoff-trace-wheel-", dir=ram_disk(min_free=2 * GIB, run_programs=True)
    ) as directory:
        yield Path(directory)


@pytest.fixture(scope="session")
def wheels(scratch: Path) -> dict[str, Path]:
    tree, out = scratch / "context", scratch / "wheels"
    copy_build_context(tree)
    run(build_command(out), cwd=tree, timeout=BUILD_SECONDS)
    built = {wheel.name.split("-")[0]: wheel for wheel in out.glob("*.whl")}
    assert set(built) == {"handoff_context", "handoff_trace"}, sorted(out.iterdir())
    return built


def make_venv(root: Path, wheels: list[Path]) -> Venv:
    """A plain virtualenv (no system site-packages) holding ``wheels`` and what they need."""
    run([sys.executable, "-m", "venv", str(root)], cwd=root.parent)
    venv = Venv(root)
    install = [venv.bin("python"), "-m", "pip", "install", "--quiet", *map(str, wheels)]
    run(install, cwd=root.parent, timeout=BUILD_SECONDS)
    return venv


@pytest.fixture(scope="session")
def venvs(scratch: Path, wheels: dict[str, Path]) -> dict[str, Venv]:
    """The service's virtualenv and the library's, made side by side: each is a venv and a
    pip process that waits mostly on its own files, so two at once take little longer
    than one."""
    wanted = {
        "service": sorted(wheels.values()),
        "library": [wheels["handoff_context"]],
    }
    with ThreadPoolExecutor(max_workers=len(wanted)) as pool:
        made = {
            name: pool.submit(make_venv, scratch / f"{name}-venv", found)
            for name, found in wanted.items()
        }
        return {name: future.result() for name, future in made.items()}


@pytest.fixture(scope="session")
def service(venvs: dict[str, Venv]) -> Venv:
    return venvs["service"]


@pytest.fixture(scope="session")
def library(venvs: dict[str, Venv]) -> Venv:
    return venvs["library"]


@pytest.fixture
def elsewhere(scratch: Path) -> Path:
    """A fresh working directory with nothing of the checkout in or above it."""
    return Path(tempfile.mkdtemp(prefix="cwd-", dir=scratch))


# --- the service's wheel ------------------------------------------------------------------


def test_the_installed_service_runs_from_its_virtualenv(service: Venv, elsewhere: Path) -> None:
    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    done = run([service.bin("handoff-trace"), "--version"], cwd=elsewhere)
    assert done.stdout.strip() == f"handoff-trace {version}"
    where = (
        "import app, app.resources, handoff_context; print(app.__file__, handoff_context.__file__)"
    )
    files = run([service.bin("python"), "-c", where], cwd=elsewhere).stdout.split()
    assert files and all(Path(f).is_relative_to(service.root) for f in files), files
    assert (
        "No broken requirements"
        in run([service.bin("python"), "-m", "pip", "check"], cwd=elsewhere).stdout
    )


def test_db_upgrade_migrates_a_new_sqlite_file(service: Venv, elsewhere: Path) -> None:
    database = elsewhere / "fresh" / "store.db"
    url = f"sqlite:///{database}"
    run([service.bin("handoff-trace"), "db", "upgrade"], cwd=elsewhere, env={"DATABASE_URL": url})
    with contextlib.closing(sqlite3.connect(database)) as connection:
        revision = connection.execute("SELECT version_num FROM alembic_version").fetchall()
        tables = {row[0] for row in connection.execute("SELECT name FROM sqlite_master")}
    assert revision == [(head_revision(),)]
    assert {"element", "hop", "flag"} <= tables


def test_serve_answers_and_renders_the_login_page_with_its_styles(
    service: Venv, elsewhere: Path
) -> None:
    cli = service.bin("handoff-trace")
    run([cli, "keys", "new", "--id", "spiffe://example.org/agent/wheel"], cwd=elsewhere)
    assert (elsewhere / "trust.json").is_file()
    port = free_port()
    command = [cli, "serve", "--port", str(port), "--db", f"sqlite:///{elsewhere / 'serve.db'}"]
    command += ["--trust", "trust.json"]
    with started(command, cwd=elsewhere, port=port, log=elsewhere / "serve.log") as client:
        assert client.get("/api/v1/healthz").json() == {"status": "ok"}
        page = client.get("/login")
        assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
        assert 'name="password"' in page.text
        sheets = stylesheets(page.text)
        assert "/static/app.css" in sheets, sheets
        for href in sheets:
            served = client.get(href)
            assert served.status_code == 200, href
            assert served.headers["content-type"].startswith("text/css"), href
            assert served.content == (REPO / href.removeprefix("/")).read_bytes(), href
        bundle = client.get("/vendor/plotly.min.js")
        assert bundle.status_code == 200
        assert bundle.headers["content-type"].startswith("text/javascript")
        assert b"plotly" in bundle.content[:4096].lower()


def stylesheets(html: str) -> list[str]:
    """The ``href`` of every ``<link rel="stylesheet">`` in a page, without query strings."""
    tags = re.findall(r"<link\b[^>]*\brel=\"stylesheet\"[^>]*>", html)
    return [re.findall(r'\bhref="([^"?]+)', tag)[0] for tag in tags]


def test_run_demo_loads_a_run_and_serves_the_dashboard(service: Venv, elsewhere: Path) -> None:
    port = free_port()
    database = elsewhere / "demo.db"
    command = [service.bin("handoff-trace"), "run-demo", "--port", str(port)]
    command += ["--db", f"sqlite:///{database}", "--dir", "demo", "--dialogs", "2"]
    log = elsewhere / "run-demo.log"
    with started(command, cwd=elsewhere, port=port, log=log) as client:
        found = re.search(r"log in as 'demo' with the one-time password (\S+)", log.read_text())
        assert found, log.read_text()
        login = {"username": "demo", "password": found.group(1), "next": "/"}
        answer = client.post("/login", data=login)
        assert answer.status_code == 303 and answer.headers["location"] == "/"
        overview = client.get("/")
        assert overview.status_code == 200 and "/static/app.css" in overview.text
    assert (elsewhere / "demo" / "capture.jsonl").is_file()
    with contextlib.closing(sqlite3.connect(database)) as connection:
        (hops,) = connection.execute("SELECT count(*) FROM hop").fetchone()
    assert hops > 0


# --- the library's wheel alone ------------------------------------------------------------

IMPORT_EVERY_MODULE = """
import json, pkgutil, importlib, sys
import handoff_context
# __main__ would run; a2a and mcp are the SDK integrations, whose SDKs are extras, and
# otel the OpenTelemetry helper (extra [otel]).
extras = {"handoff_context.a2a", "handoff_context.mcp", "handoff_context.otel"}
names = [m.name for m in pkgutil.walk_packages(handoff_context.__path__, "handoff_context.")
         if not m.name.endswith(".__main__") and m.name not in extras]
for name in names:
    importlib.import_module(name)
print(json.dumps({"file": handoff_context.__file__, "modules": names,
                  "loaded": sorted({m.split(".")[0] for m in sys.modules})}))
"""

DISTRIBUTIONS = """
import importlib.metadata, json
print(json.dumps(sorted({d.metadata["Name"] for d in importlib.metadata.distributions()})))
"""


def test_the_library_installs_alone_without_the_service_stack(
    library: Venv, elsewhere: Path
) -> None:
    names = json.loads(run([library.bin("python"), "-c", DISTRIBUTIONS], cwd=elsewhere).stdout)
    installed = {re.sub(r"[-_.]+", "-", name).lower() for name in names}
    assert "handoff-context" in installed and "handoff-trace" not in installed
    assert not installed & set(SERVICE_STACK), sorted(installed)
    # The SDK integrations are extras ([a2a], [mcp]): the core brings neither SDK.
    assert not installed & {"a2a-sdk", "mcp", "protobuf", "pydantic"}, sorted(installed)
    done = run([library.bin("python"), "-c", IMPORT_EVERY_MODULE], cwd=elsewhere)
    report = json.loads(done.stdout)
    assert Path(report["file"]).is_relative_to(library.root)
    assert report["modules"], "handoff_context has no modules"
    assert "handoff_context.agent" in report["modules"]  # the agent side needs no SDK
    assert not set(report["loaded"]) & {*SERVICE_STACK, "app"}
