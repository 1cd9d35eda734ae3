"""One big, deep dialog for the demo (``handoff-trace demo --deep-dialog HOPS``): what the
dashboard's dialog page must stay readable with, made by a user command rather than a test
helper.

``HOPS`` offers in one dialog, each really signed by the demo's agents and each naming its
parent as ``prev`` (no chain carried: a chain that deep is past any ``max_chain``); one path
goes ``DEEP_PATH`` levels down and ends at a hop delegated to ``NEEDLE`` (search for
"needle"), the rest hang in a bushy tree a few levels deep. The delegate accepts and
completes each hop, so nothing times out. Records are appended to the capture in receive
time order, after the rest of the run.
"""

from __future__ import annotations

import json
import random
from typing import BinaryIO

from handoff_context import make_offer, make_status

from app.demo.agents import Agent, Cast

DEEP_PATH = 80  # levels of the deep path (fewer when the dialog is smaller)
BUSHY = 8  # how deep the rest of the tree goes
NEEDLE = "needle"


def write_deep_dialog(out: BinaryIO, cast: Cast, *, hops: int, start: int, seed: int) -> str:
    """Append the dialog's capture records to ``out``; returns its dialog id."""
    rng = random.Random(f"handoff-trace-demo:{seed}:deep-dialog")
    dialog = f"ctx-deep-{seed}-{hops}"
    agents = list(cast.agents)
    path = min(DEEP_PATH, max(0, hops - 1))
    open_slots: list[tuple[bytes, Agent, int]] = []  # (offer, its delegate, depth)
    previous: tuple[bytes, Agent, int] | None = None
    at = start
    for i in range(hops):
        deep = i >= hops - path and previous is not None
        parent = previous if deep else (rng.choice(open_slots) if open_slots and i else None)
        issuer = parent[1] if parent is not None else rng.choice(agents)
        delegate = rng.choice([a for a in agents if a is not issuer])
        aud = f"spiffe://deep.example/agent/{NEEDLE}-1" if i == hops - 1 else delegate.iss
        at += 1
        fields = {} if parent is None else {"prev": _digest(parent[0])}
        offer = make_offer(issuer.signer, aud=aud, dialog=dialog, iat=at, lifetime=300, **fields)
        _record(out, at, aud, dialog, {"offer": offer.decode()})
        if i < hops - 1:  # the needle's delegate is no agent of the run: it never answers
            for state in ("accepted", "completed"):
                at += 1
                status = make_status(delegate.signer, offer_octets=offer, state=state, iat=at)
                _record(out, at, issuer.iss, dialog, {"status": status.decode()})
        depth = 0 if parent is None else parent[2] + 1
        node = (offer, delegate, depth)
        if not deep and depth < BUSHY:
            open_slots.append(node)
            if len(open_slots) > 400:  # bushy, not one long fan
                open_slots.pop(rng.randrange(1, len(open_slots)))
        previous = node
    return dialog


def _digest(offer: bytes) -> bytes:
    from handoff_context import handoff_digest

    return handoff_digest(offer)


def _record(out: BinaryIO, at: int, by: str, dialog: str, payload: dict[str, str]) -> None:
    line = {"received_at": at, "received_by": by, "dialog": dialog, "payload": payload}
    out.write(json.dumps(line).encode() + b"\n")
