"""Hostile inputs for the enforce and audit tests: each a real SDK request a careless or
malicious delegator could send, built by hand (no integration on the sending side), and the
small real parts those tests need (a clock to move, a TCP proxy that drops a reply)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from a2a.types import a2a_pb2 as pb
from handoff_context import Signer, b64url_decode, b64url_encode, handoff_object, make_offer

from app.capture.carriers import A2A_EXTENSION_URI

from .system import CODER, PLANNER, TOOL


class Clock:
    """Wall-clock seconds plus an offset a test moves (never a real wait)."""

    def __init__(self) -> None:
        self.offset = 0

    def __call__(self) -> int:
        return int(time.time()) + self.offset


def flipped(offer: bytes) -> bytes:
    """The offer with one bit of its signature flipped (still canonical base64url)."""
    head, payload, signature = offer.split(b".")
    raw = bytearray(b64url_decode(signature.decode("ascii"), what="signature"))
    raw[0] ^= 0x01
    return b".".join([head, payload, b64url_encode(bytes(raw)).encode("ascii")])


@dataclass(frozen=True)
class Hostile:
    """One hostile offer: its dialog, the handoff object, and what a careful receiver says."""

    name: str
    dialog: str
    carried: dict[str, Any]
    reason: str
    signed: bool  # whether the profile allows a signed rejected for it


def hostile_offers(to: Signer, *, now: int, tag: str) -> list[Hostile]:
    """The offers a delegate must refuse, each in a dialog of its own (``tag`` keeps the
    dialogs of two runs apart)."""

    def offer(dialog: str, **fields: Any) -> bytes:
        return make_offer(PLANNER, aud=fields.pop("aud", to.iss), dialog=dialog, **fields)

    d = {name: f"{tag}-{name}" for name in ("flipped", "audience", "expired")}
    return [
        Hostile(
            "flipped",
            d["flipped"],
            handoff_object(flipped(offer(d["flipped"], iat=now))),
            "bad-signature",
            True,
        ),
        Hostile(
            "audience",
            d["audience"],
            handoff_object(offer(d["audience"], iat=now, aud=other(to).iss)),
            "wrong-audience",
            False,
        ),
        Hostile(
            "expired",
            d["expired"],
            handoff_object(offer(d["expired"], iat=now - 1000, lifetime=100)),
            "stale",
            True,
        ),
    ]


def other(to: Signer) -> Signer:
    """A trusted agent that is not ``to``."""
    return TOOL if to is not TOOL else CODER


def message(text: str, dialog: str, carried: dict[str, Any] | None) -> pb.Message:
    out = pb.Message(
        message_id=f"m-{time.monotonic_ns()}",
        context_id=dialog,
        role=pb.Role.ROLE_USER,
        parts=[pb.Part(text=text)],
    )
    if carried is not None:
        out.extensions.append(A2A_EXTENSION_URI)
        out.metadata.update({A2A_EXTENSION_URI: carried})
    return out


class DroppingProxy:
    """A TCP proxy in front of an agent that forwards everything, except that the reply
    to the first request containing ``marker`` is thrown away and the connection closed:
    the request reached the agent and the work ran, the answer never arrived."""

    def __init__(self, upstream_port: int, marker: bytes) -> None:
        self.upstream_port = upstream_port
        self.marker = marker
        self.dropped = 0
        self._armed = True
        self._tasks: set[asyncio.Task[Any]] = set()

    async def _pipe(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        drop: list[bool],
    ) -> None:
        with contextlib.suppress(ConnectionError):
            while data := await reader.read(65536):
                if drop[0]:
                    self.dropped += 1
                    break
                writer.write(data)
                await writer.drain()
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()

    async def _handle(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        up_r, up_w = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        drop = [False]

        async def upward() -> None:
            with contextlib.suppress(ConnectionError):
                while data := await client_r.read(65536):
                    if self._armed and self.marker in data:
                        self._armed = False
                        drop[0] = True
                    up_w.write(data)
                    await up_w.drain()
            up_w.close()
            with contextlib.suppress(ConnectionError):
                await up_w.wait_closed()

        try:
            await asyncio.gather(upward(), self._pipe(up_r, client_w, drop))
        finally:
            self._tasks.discard(task)

    @contextlib.asynccontextmanager
    async def serving(self) -> AsyncIterator[str]:
        server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        try:
            yield f"http://127.0.0.1:{port}"
        finally:
            server.close()
            # Every connection ends with the client's; wait for them, so that no stream
            # outlives the event loop.
            await asyncio.gather(*self._tasks, return_exceptions=True)
            await server.wait_closed()


async def refuses_each(client: Any, hostile: list[Any]) -> None:
    """Each hostile offer through an MCP client session: refused with the MCP error the SDK
    raises (-32602), naming the reason, with a signed status exactly where one is allowed."""
    import pytest
    from handoff_context import MCP_META_KEY
    from mcp.shared.exceptions import MCPError

    for h in hostile:
        with pytest.raises(MCPError) as refused:
            await client.call_tool("build", {"target": h.name}, meta={MCP_META_KEY: h.carried})
        assert refused.value.code == -32602
        assert refused.value.data["reason"] == h.reason
        assert ("status" in refused.value.data) is h.signed
