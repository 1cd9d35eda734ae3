"""Start the example's multi-agent system, run three jobs through it, stop it:

    python examples/agents/run.py        (or: make example)

with ``make run``'s dashboard serving at http://127.0.0.1:8000/ (start it first, in another
terminal). The user asks the planner (A2A); the planner hands the coding to the coder (A2A)
and the build to the tool (MCP Streamable HTTP). Every agent signs, checks and answers
through the handoff-context integrations and reports to the dashboard.

What this launcher does that agents never do: make each agent a key (``var/example/keys``,
mode 0600) once, write the trust file the agents read and add their public keys to the
service's trust file (``var/demo/trust.json``, which the running service reloads when it
changes), and create an ingest token unless ``HANDOFF_TRACE_TOKEN`` is set.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from common import AGENTS  # noqa: E402
from handoff_context import Signer, trust_document  # noqa: E402

SERVERS = ("tool", "coder", "planner")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def signers(keys: Path) -> list[Signer]:
    out = []
    for name, iss in AGENTS.items():
        path = keys / f"{name}.jwk"
        if not path.exists():
            Signer.generate(iss, "ES256", kid=f"{name}-1").save(path)
        out.append(Signer.load(path))
    return out


def write_trust(agents: list[Signer], own: Path, service: Path | None) -> None:
    """The agents' trust file, and the service's with the agents' keys added or replaced."""
    doc = trust_document(agents)
    own.write_text(json.dumps(doc, indent=2))
    if service is None:
        return
    theirs = json.loads(service.read_text()) if service.exists() else {"issuers": []}
    ids = {a.iss for a in agents}
    theirs["issuers"] = [i for i in theirs["issuers"] if i["id"] not in ids] + doc["issuers"]
    temp = service.with_name(f".{service.name}.{uuid.uuid4().hex}")
    temp.write_text(json.dumps(theirs, indent=2))
    os.replace(temp, service)  # one change the service sees whole


def ingest_token(db: str | None, home: Path) -> str:
    """``HANDOFF_TRACE_TOKEN``, or the token made at the first run (kept in ``home``)."""
    if os.environ.get("HANDOFF_TRACE_TOKEN"):
        return os.environ["HANDOFF_TRACE_TOKEN"]
    kept = home / "token"
    if kept.exists():
        return kept.read_text().strip()
    cli = Path(sys.executable).parent / "handoff-trace"
    name = f"example-agents-{uuid.uuid4().hex[:8]}"  # token names are never reused
    command = [str(cli), "tokens", "create", "--role", "ingest", "--name", name]
    done = subprocess.run(
        [*command, *(["--db", db] if db else [])], capture_output=True, text=True, check=True
    )
    token = done.stdout.strip().splitlines()[-1]
    fd = os.open(kept, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(token + "\n")
    return token


def wait_for(port: int, proc: subprocess.Popen[bytes], name: str) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"the {name} exited (code {proc.returncode})")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            time.sleep(0.1)
    raise SystemExit(f"the {name} did not start within 60 s")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--service", default="http://127.0.0.1:8000", help="the dashboard's URL")
    parser.add_argument(
        "--service-trust",
        default="var/demo/trust.json",
        help="the trust file the service watches ('' to leave it alone)",
    )
    parser.add_argument("--db", default=None, help="the service's store, to create a token")
    parser.add_argument("--dir", default="var/example", help="keys, trust and agent state")
    args = parser.parse_args()
    home = Path(args.dir).resolve()
    (home / "keys").mkdir(parents=True, exist_ok=True)
    try:
        urllib.request.urlopen(args.service + "/api/v1/healthz", timeout=5).close()
    except OSError:
        print(
            f"no handoff-trace service at {args.service}: start `make run` first", file=sys.stderr
        )
        return 2
    write_trust(
        signers(home / "keys"),
        home / "trust.json",
        Path(args.service_trust) if args.service_trust else None,
    )
    env = {
        **os.environ,
        "EXAMPLE_DIR": str(home),
        "HANDOFF_TRACE_URL": args.service,
        "HANDOFF_TRACE_TOKEN": ingest_token(args.db, home),
        **{f"EXAMPLE_{name.upper()}_PORT": str(free_port()) for name in SERVERS},
    }
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for name in SERVERS:
            proc = subprocess.Popen([sys.executable, str(HERE / f"{name}.py")], env=env, cwd=home)
            procs.append(proc)
            wait_for(int(env[f"EXAMPLE_{name.upper()}_PORT"]), proc, name)
        run = time.strftime("%H%M%S")
        print(f"the user asks the planner for three jobs (run {run}):", flush=True)
        code = subprocess.run(
            [sys.executable, str(HERE / "user.py"), run], env=env, cwd=home, check=False
        ).returncode
    finally:
        for proc in procs:  # SIGINT: uvicorn shuts down, then the reporters flush at exit
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)
        for proc in procs:
            proc.wait(60)
    print(f"\nopen {args.service}/hops?dialog=example-{run}-complete (and -fail, -wait)")
    return code


if __name__ == "__main__":
    sys.exit(main())
