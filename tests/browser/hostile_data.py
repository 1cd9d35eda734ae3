"""A store made only of hostile traffic, for tests/browser/test_xss.py.

Every field an agent or a capture chooses carries a payload, as far as SPEC 1.2 lets it:
identifiers (``iss``, ``aud``, ``dialog``, ``task``, ``obo``, ref ``uri``, ``kid``) are
printable ASCII without spaces, so they carry markup spelt without spaces
(``<img/src=x/onerror=...>``), attribute break-outs, ``hx-*`` attributes and
``javascript:`` URLs; free text (a status's ``detail``, a ref's ``name``, unknown payload
members) also carries spaces, bidi overrides and control characters. Every payload that
would run sets ``window.__xss`` or calls ``alert``, and every one that would fetch names
``evil.example``, so the test sees either.

The elements are signed with ``app.protocol.sign`` by keys listed in a trust file (so they
pass the signature check and are stored), and ingested through the one pipeline:

- A -> B: an offer with hostile dialog, task, obo and refs, in a capture record naming the
  same hostile dialog; accepted, then failed with a ``javascript:`` reason URI and a
  hostile detail;
- B -> C: the next hop, carrying A's offer as its chain;
- A -> B again with the same hop and other octets: equivocation (a flag with both offers
  side by side);
- B -> C travels in an A2A ``SendMessage`` whose ``contextId`` is the hostile dialog;
- C -> D with a lifetime over the policy: rejected, a flag, and an element page;
- D -> A in an A2A message whose ``contextId`` is another hostile string: a dialog
  mismatch, whose detail quotes it;
- an offer signed by a key the trust file does not list: untrusted-key.

``UPLOAD`` is a capture for the upload form whose items the verifier must refuse: an
identifier with a bidi override and a space, and a capture record whose dialog carries a
control character; its file name is hostile too (``UPLOAD_NAME``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.carriers import A2A_EXTENSION_URI
from app.ingest import Pipeline, ingest
from app.protocol.encoding import digest_text, handoff_digest
from app.protocol.lifecycle import Timing
from app.protocol.sign import (
    Signer,
    handoff_object,
    make_offer,
    make_status,
    new_hop,
    offer_payload,
    sign_payload,
    trust_document,
)
from app.protocol.trust import TrustStore
from app.store import db
from app.verifying import VerifyOptions

T = 1_793_200_000  # the offers' issue time
NOW = T + 300  # the service's pinned clock: every hop is still live or just answered

# Identifiers: printable ASCII, no spaces (SPEC 1.2).
A = "spiffe://a.example/<script>window.__xss='iss'</script>"
B = 'spiffe://b.example/"onmouseover="window.__xss=\'aud\'"x="<b>bold<br>'
C = "javascript:window.__xss='C'//<img/src=https://evil.example/c.png/onerror=alert('C')>"
D = "spiffe://d.example/<div/hx-get=https://evil.example/hx/hx-trigger=load/hx-on::load=alert(1)>"
STRANGER = "spiffe://x.example/'hx-get='//evil.example/s'hx-trigger='load'"
DIALOG = "ctx-<svg/onload=window.__xss='dialog'>"
TASK = "<script>alert('task')</script>"
OBO = "javascript:alert('obo')"
KID = "<img/src=https://evil.example/kid.png/onerror=alert('kid')>"
REASON = "javascript:window.__xss='reason'"
# An A2A contextId that differs from the offer's dialog (a policy rejection quoting it).
CONTEXT = "ctx-\"><script>window.__xss='ctx'</script>"
# Free text: spaces, markup, bidi overrides and isolates, control characters.
DETAIL = (
    "<script>window.__xss='detail'</script><img src=x onerror=\"alert('detail')\"> "
    '<a href="javascript:alert(\'a\')" hx-get="https://evil.example/d" hx-trigger="load">'
    "x</a> done \u202egnp.exe\u202c \u2067rtl\u2069 bell\x07 esc\x1b[31m back\x08"
)
REF_NAME = "<img src=https://evil.example/ref.png> \u202eeman"
NOTE = "<style>body{background:url(https://evil.example/bg)}</style> \u2066\u202e\x1b"
# What the upload form gets: refused by the parser, shown only in verdict details.
UPLOAD_NAME = "<img src=x onerror=alert('file')>\u202egnp.jsonl"
BAD_IDENTIFIER = "spiffe://a.example/\u202egnp evil"
BAD_DIALOG = "ctx-\x1b[2J<script>alert('rec')</script>"

SENTINEL_HOSTS = ("evil.example",)


@dataclass(frozen=True)
class Hostile:
    db: Path
    trust: Path
    now: int
    upload: bytes  # the capture for the upload form
    offer: str  # digest of A -> B (a hop page)
    next_offer: str  # digest of B -> C (a hop page with a chain)
    rejected: str  # digest of C -> D (an element page)
    untrusted: str  # digest of the stranger's offer (an element page)
    mismatch: str  # digest of D -> A, whose A2A contextId is not its dialog
    equivocation_flag: int


def _record(at: int, by: str | None, payload: dict[str, Any]) -> dict[str, Any]:
    record: dict[str, Any] = {"received_at": at, "payload": payload}
    if by is not None:
        record["received_by"] = by
    return record


def _a2a(handoff: dict[str, Any], context: str) -> dict[str, Any]:
    """An A2A 1.0 SendMessage request carrying ``handoff`` (SPEC 9)."""
    message = {
        "messageId": "msg-1",
        "contextId": context,
        "role": "ROLE_USER",
        "parts": [{"text": "<img src=x onerror=alert('part')> \u202e"}],
        "metadata": {A2A_EXTENSION_URI: handoff},
        "extensions": [A2A_EXTENSION_URI],
    }
    return {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": message}}


def _upload(a: Signer) -> bytes:
    bad_iss = sign_payload(
        offer_payload(iss=BAD_IDENTIFIER, aud=B, dialog=DIALOG, iat=T, task=TASK), a
    )
    good = make_offer(a, aud=B, dialog=DIALOG, iat=T, task=TASK)
    records = [
        _record(T + 1, B, {"offer": bad_iss.decode()}),
        {**_record(T + 1, B, {"offer": good.decode()}), "dialog": BAD_DIALOG},
        _record(T + 1, B, {"offer": good.decode()}),
    ]
    return "".join(json.dumps(r) + "\n" for r in records).encode()


def build(root: Path) -> Hostile:
    a = Signer.generate(A, "ES256", kid=KID)
    b = Signer.generate(B, "Ed25519")
    c = Signer.generate(C, "ES256")
    d = Signer.generate(D, "Ed25519")
    stranger = Signer.generate(STRANGER, "ES256")  # not in the trust file
    refs = [
        {
            "kind": "digest",
            "digest": b"\x01" * 32,
            "name": REF_NAME,
            "uri": "javascript:alert('uri')",
            "media_type": "text/html",
        }
    ]
    hop = new_hop()
    first = make_offer(
        a,
        aud=B,
        dialog=DIALOG,
        iat=T,
        lifetime=240,
        hop=hop,
        task=TASK,
        obo=OBO,
        refs=refs,
        extra={"note": NOTE},
    )
    twin = make_offer(a, aud=B, dialog=DIALOG, iat=T + 2, lifetime=240, hop=hop, task="other")
    accepted = make_status(b, offer_octets=first, state="accepted", iat=T + 5)
    failed = make_status(
        b, offer_octets=first, state="failed", iat=T + 9, reason=REASON, detail=DETAIL
    )
    second = make_offer(
        b,
        aud=C,
        dialog=DIALOG,
        iat=T + 6,
        lifetime=240,
        task=TASK,
        prev=handoff_digest(first),
    )
    too_long = make_offer(c, aud=D, dialog=DIALOG, iat=T + 20, lifetime=900, task=TASK)
    untrusted = make_offer(stranger, aud=D, dialog=DIALOG, iat=T + 30)
    elsewhere = make_offer(d, aud=A, dialog=DIALOG, iat=T + 40, task=TASK)
    records = [
        {**_record(T + 1, B, handoff_object(first)), "dialog": DIALOG},
        _record(T + 3, B, handoff_object(twin)),
        _record(T + 6, None, {"status": accepted.decode()}),
        _record(T + 7, C, _a2a(handoff_object(second, [first]), DIALOG)),
        _record(T + 10, None, {"status": failed.decode()}),
        _record(T + 21, D, handoff_object(too_long)),
        _record(T + 31, D, handoff_object(untrusted)),
        _record(T + 41, A, _a2a(handoff_object(elsewhere), CONTEXT)),
    ]
    capture = "".join(json.dumps(r) + "\n" for r in records).encode()

    trust_path = root / "trust.json"
    trust_path.write_text(json.dumps(trust_document([a, b, c, d])))
    trust_path.chmod(0o644)
    url = f"sqlite:///{root / 'store.db'}"
    engine = db.make_engine(url)
    try:
        db.ensure_schema(engine)
        pipeline = Pipeline(
            engine=engine,
            trust=TrustStore.load(trust_path),
            options=VerifyOptions(at=NOW),
            timing=Timing(),
        )
        report = ingest(pipeline, [("hostile.jsonl", capture)], now=NOW)
        assert not report.errors, report.errors
        outcomes = [
            (v.outcome.value, v.reason.value if v.reason else None) for v in report.verdicts
        ]
        assert outcomes == [
            ("accept", None),
            ("reject", "equivocation"),
            ("accept", None),
            ("accept", None),
            ("accept", None),
            ("reject", "policy"),
            ("reject", "untrusted-key"),
            ("reject", "policy"),
        ], outcomes
        flag_id = _flag(engine, "equivocation")
    finally:
        engine.dispose()
    return Hostile(
        db=root / "store.db",
        trust=trust_path,
        now=NOW,
        upload=_upload(a),
        offer=digest_text(handoff_digest(first)),
        next_offer=digest_text(handoff_digest(second)),
        rejected=digest_text(handoff_digest(too_long)),
        untrusted=digest_text(handoff_digest(untrusted)),
        mismatch=digest_text(handoff_digest(elsewhere)),
        equivocation_flag=flag_id,
    )


def _flag(engine: Any, kind: str) -> int:
    from sqlalchemy import select

    from app.store.models import FlagRow

    with db.transaction(engine) as session:
        found = session.execute(
            select(FlagRow.id).where(FlagRow.kind == kind).order_by(FlagRow.id)
        ).scalar()
    assert found is not None, f"the hostile store must hold a {kind} flag"
    return int(found)
