"""Real servers on loopback for the live tests: an ASGI app under uvicorn in a thread."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import uvicorn


def free_port() -> int:
    return free_ports(1)[0]


def free_ports(n: int) -> list[int]:
    """``n`` distinct free loopback ports: each socket stays bound until all are chosen
    (chosen one at a time, the kernel may hand out the same port twice, as it did)."""
    with contextlib.ExitStack() as stack:
        sockets = [stack.enter_context(socket.socket()) for _ in range(n)]
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [int(s.getsockname()[1]) for s in sockets]


@contextmanager
def serving(app: Any, *, port: int | None = None, lifespan: str = "off") -> Iterator[str]:
    """Serve ``app`` on a loopback port until the block ends; yields its base URL."""
    port = port or free_port()
    config = uvicorn.Config(
        app, host="127.0.0.1", port=port, log_level="warning", lifespan=lifespan
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        wait_until(lambda: server.started, what=f"uvicorn on port {port}")
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(30)


def wait_until(ready: Any, *, what: Any, timeout: float = 30.0, interval: float = 0.01) -> None:
    """Poll a readiness condition (never a fixed sleep standing in for it). ``what``: a
    text, or a callable giving one, for the error."""
    deadline = time.monotonic() + timeout
    while not ready():
        if time.monotonic() > deadline:
            said = what() if callable(what) else what
            raise TimeoutError(f"{said} was not ready within {timeout} s")
        time.sleep(interval)


@contextmanager
def serving_twice(app: Any, ports: tuple[int, int]) -> Iterator[tuple[str, str]]:
    """Serve ``app`` on two loopback ports at once, one uvicorn server as ``handoff-trace
    tap --egress-listen`` runs it (lifespan on); yields both base URLs."""
    from app.cli.tap import bound

    sockets = [bound("127.0.0.1", port) for port in ports]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": sockets}, daemon=True)
    thread.start()
    try:
        wait_until(lambda: server.started, what=f"uvicorn on ports {ports}")
        yield f"http://127.0.0.1:{ports[0]}", f"http://127.0.0.1:{ports[1]}"
    finally:
        server.should_exit = True
        thread.join(30)
        for sock in sockets:
            sock.close()
