"""A store holding one very large dialog, for the dialog page's browser test and its render
benchmark (bench/dialog_render.py).

The offers are really signed (Ed25519, each naming its parent as ``prev``), but the rows are
written straight into the tables the dialog page reads (element, hop, link, flag) instead of
going through ingest: ingest is measured elsewhere, and 20,000 hops through it would cost a
minute of this machine for a test about drawing. The hop states are final (completed, a
few failed), so the sweep has nothing to re-derive. One deep path, ``DEEP`` hops long, ends
at the hop delegated to ``DEEP_AGENT``: the search test looks for it.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path

from handoff_context import Signer, handoff_digest, make_offer, trust_document
from sqlalchemy import insert

from app.store import db
from app.store.models import ElementRow, FlagRow, HopRow, LinkRow

DIALOG = "ctx-big-dialog"
DEEP = 60
DEEP_AGENT = "spiffe://deep.example/agent/needle-1"
START = 1_790_000_000


@dataclass(frozen=True)
class BigDialog:
    db: Path
    trust: Path
    now: int
    dialog: str
    hops: int
    deep_offer: str  # base64url digest of the deepest hop's offer


def build_big(root: Path, *, hops: int, seed: int = 7, deep: int = DEEP) -> BigDialog:
    rng = random.Random(seed)
    agents = [
        Signer.generate(f"spiffe://big.example/agent/worker-{i}", "Ed25519") for i in range(12)
    ]
    trust = root / "trust.json"
    trust.write_text(json.dumps(trust_document(agents)))
    store = root / "big.db"
    engine = db.make_engine(f"sqlite:///{store}")
    try:
        db.ensure_schema(engine)
        rows = _rows(rng, agents, hops, deep)
        with db.transaction(engine) as session:
            for table, values in rows.tables.items():
                for start in range(0, len(values), 2000):
                    session.execute(insert(table), values[start : start + 2000])
    finally:
        engine.dispose()
    return BigDialog(store, trust, START + hops + 3600, DIALOG, hops, rows.deep)


@dataclass
class _Rows:
    tables: dict[type, list[dict[str, object]]]
    deep: str


def _rows(rng: random.Random, agents: list[Signer], hops: int, deep_path: int) -> _Rows:
    from handoff_context import digest_text

    elements: list[dict[str, object]] = []
    hop_rows: list[dict[str, object]] = []
    links: list[dict[str, object]] = []
    flags: list[dict[str, object]] = []
    parents: list[tuple[bytes | None, int]] = [(None, 0)]  # (offer, depth) of open slots
    deep_from = hops - deep_path
    previous: bytes | None = None
    deep = ""
    depth_of: dict[bytes, int] = {}
    for i in range(hops):
        if i >= deep_from:
            prev = previous  # the deep path: each hop below the one before
        else:
            prev = parents[rng.randrange(len(parents))][0] if i else None
        iss = agents[i % len(agents)]
        aud = DEEP_AGENT if i == hops - 1 else agents[(i * 7 + 3) % len(agents)].iss
        iat = START + i
        octets = make_offer(iss, aud=aud, dialog=DIALOG, iat=iat, lifetime=300, prev=prev)
        digest = handoff_digest(octets)
        hop_id = f"hop{i:019d}bigdialog"
        state = "failed" if rng.random() < 0.01 else "completed"
        elements.append(
            {
                "digest": digest, "form": "jws", "type": "offer", "octets": octets,
                "iss": iss.iss, "aud": aud, "hop": hop_id, "hop_iss": iss.iss,
                "dialog": DIALOG, "task": None, "iat": iat, "exp": iat + 300, "offer": None,
                "state": None, "reason": None, "ref_count": 0, "content": digest,
                "first_seen": iat,
            }
        )  # fmt: skip
        hop_rows.append(
            {
                "iss": iss.iss, "hop": hop_id, "offer": digest, "aud": aud, "dialog": DIALOG,
                "task": None, "iat": iat, "exp": iat + 300, "state": state,
                "a2a_state": None, "accepted_at": iat + 1, "terminal_at": iat + 2,
                "deadline": None, "derived_at": iat + 2,
            }
        )  # fmt: skip
        if prev is not None:
            links.append({"offer": digest, "prev": prev, "dialog": DIALOG})
        if rng.random() < 0.002:
            flags.append(
                {
                    "key": digest.hex(), "kind": "lost-outcome", "variant": None,
                    "severity": "high", "status": "open", "assignee": None,
                    "snoozed_until": None, "note": None, "evidence": [digest_text(digest)],
                    "iss": iss.iss, "hop": hop_id, "offer": digest, "opened_at": iat + 2,
                    "detail": "accepted, and no outcome", "updated_at": iat + 2,
                    "case_id": None,
                }
            )  # fmt: skip
        depth = 0 if prev is None else depth_of.get(prev, 0) + 1
        depth_of[digest] = depth
        if i < deep_from and depth < 9:
            parents.append((digest, depth))
            if len(parents) > 400:  # keep the tree bushy, not a single long fan
                parents.pop(rng.randrange(1, len(parents)))
        previous = digest
        deep = digest_text(digest)
    return _Rows({ElementRow: elements, HopRow: hop_rows, LinkRow: links, FlagRow: flags}, deep)
