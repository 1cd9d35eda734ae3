"""The worked example of docs/envelopes.md's seed as a capture: triage hands a double-charge
case to billing at epoch 3, billing accepts it as epoch 4, triage marks the case handed off,
and an hour later triage's retry job writes to the case at epoch 3, which the case system
refuses. Built with the demo's wire helpers (A2A 1.0), so it is what the simulator sends.

Also a hand-built ``CaseDetail`` of the same story, for tests of the page code alone.
"""

from __future__ import annotations

import hashlib

from app.demo import envelope_wire as wire
from app.demo.carry import A2A_1_0
from app.ingest.cases import CaseDetail, CaseEvent, Envelope, Epoch, Fact, Reference
from app.store.models import FlagRow

T0 = 1_793_000_000
CASE = "case-2026-0042"
HANDOFF = f"{CASE}:4"
TRIAGE = "https://agents.acme.example/triage"
BILLING = "https://agents.acme.example/billing"
TRANSCRIPT = "case-2026-0042.transcript.txt"
TRANSCRIPT_TEXT = b"customer: I was charged twice.\nagent: I see two payments 40 s apart.\n"
HOSTILE_FACT = "<img src=x onerror=alert(7)>"


def envelope() -> dict[str, object]:
    return {
        "version": 2,
        "case_id": CASE,
        "handoff_id": HANDOFF,
        "from_agent": TRIAGE,
        "epoch": 3,
        "goal": "Refund the duplicate card payment",
        "done": ["verified the account", "found two identical payments 40 s apart"],
        "remaining": ["refund one payment", "confirm with the customer"],
        "facts": [
            {"key": "account_id", "value": "acct-829", "source": "auth-system", "verified": True},
            {
                "key": "payment_ids",
                "value": ["pay_8f2a", "pay_8f2b"],
                "source": "payments-api",
                "verified": True,
            },
            {
                "key": "disputed_amount",
                "value": {"amount": 4999, "currency": "EUR"},
                "source": "customer",
                "verified": False,
            },
            {"key": "customer_note", "value": HOSTILE_FACT, "source": None, "verified": False},
        ],
        "open_questions": ["Was the second charge captured or only authorised?"],
        "constraints": {"response_target": "48h", "refund_cap": 100},
        "summary": "Customer reports a double charge; triage verified the account and found "
        "two identical payments. Billing should refund one.",
    }


def records(start: int = T0) -> list[dict[str, object]]:
    digest = hashlib.sha256(TRANSCRIPT_TEXT).hexdigest()
    url = wire.signed_url(
        TRANSCRIPT, style="amz", signed_at=start - 60, lifetime=86400, token="ab" * 16
    )
    parts = [
        wire.text_part(f"Handoff of case {CASE}. Accept or reject.", kind=A2A_1_0),
        wire.data_part(envelope(), wire.ENVELOPE_TYPE, kind=A2A_1_0),
        wire.url_part(
            url,
            "text/plain",
            TRANSCRIPT,
            {"sha256": digest, "bytes": len(TRANSCRIPT_TEXT)},
            kind=A2A_1_0,
        ),
    ]
    send = wire.send(
        A2A_1_0,
        request_id=1,
        message_id=HANDOFF,
        context_id="ctx-triage-billing-1",
        parts=parts,
        related=[],
    )
    accepted = {"accepted": True, "case_id": CASE, "epoch": 4, "handoff_id": HANDOFF}
    answer = wire.answer(
        A2A_1_0,
        request_id=1,
        task_id="task-billing-77",
        context_id="ctx-triage-billing-1",
        data=accepted,
    )

    def event(agent: str, action: str, at: int, epoch: int, **kw: object) -> dict[str, object]:
        return {
            "received_at": at,
            "payload": wire.case_event(CASE, agent, action, epoch=epoch, at=at, **kw),  # type: ignore[arg-type]
        }

    return [
        event(TRIAGE, "write", start, 3, outcome="applied", detail="handoff intent"),
        {"received_at": start + 2, "received_by": BILLING, "payload": send},
        {"received_at": start + 30, "received_by": TRIAGE, "payload": answer},
        event(TRIAGE, "handed-off", start + 35, 3, detail="status pointer only"),
        event(BILLING, "write", start + 120, 4, outcome="applied", detail="refund issued"),
        event(TRIAGE, "write", start + 3635, 3, outcome="rejected", detail="retry job: add a note"),
    ]


def detail(start: int = T0) -> CaseDetail:
    """The same case as the store would describe it, built by hand."""
    facts = tuple(
        Fact(str(f["key"]), f["value"], f["source"], bool(f["verified"]))  # type: ignore[index]
        for f in envelope()["facts"]  # type: ignore[attr-defined]
    )
    ref = Reference(
        url=f"{wire.FILES}/{TRANSCRIPT}?X-Amz-Expires=86400",
        media_type="text/plain",
        filename=TRANSCRIPT,
        sha256=hashlib.sha256(TRANSCRIPT_TEXT).hexdigest(),
        size=len(TRANSCRIPT_TEXT),
        outcome="verified",
        detail=None,
    )
    env = envelope()
    sent = Envelope(
        handoff_id=HANDOFF,
        case_id=CASE,
        from_agent=TRIAGE,
        to_agent=BILLING,
        epoch=3,
        received_at=start + 2,
        media_type=wire.ENVELOPE_TYPE,
        errors=(),
        goal=str(env["goal"]),
        done=tuple(env["done"]),  # type: ignore[arg-type]
        remaining=tuple(env["remaining"]),  # type: ignore[arg-type]
        facts=facts,
        open_questions=tuple(env["open_questions"]),  # type: ignore[arg-type]
        constraints=dict(env["constraints"]),  # type: ignore[call-overload]
        summary=str(env["summary"]),
        references=(ref,),
        response="accepted",
        response_detail=None,
    )

    def ev(at: int, kind: str, agent: str, epoch: int, outcome: str | None = None) -> CaseEvent:
        return CaseEvent(at, kind, agent, epoch, HANDOFF, outcome, None, "worked-example")

    events = (
        ev(start, "write", TRIAGE, 3, "applied"),
        ev(start + 2, "handoff", TRIAGE, 3),
        ev(start + 30, "accepted", BILLING, 4),
        ev(start + 35, "handed-off", TRIAGE, 3),
        ev(start + 120, "write", BILLING, 4, "applied"),
        ev(start + 3635, "write", TRIAGE, 3, "rejected"),
    )
    epochs = (
        Epoch(3, TRIAGE, start, start + 30, None),
        Epoch(4, BILLING, start + 30, None, HANDOFF),
    )
    flag = FlagRow(
        id=41,
        key="0" * 64,
        kind="two-owners",
        severity="critical",
        evidence=[],
        iss=TRIAGE,
        hop=HANDOFF,
        opened_at=start + 3635,
        detail="a write at epoch 3 after the acceptance of epoch 4",
        updated_at=start + 3635,
        case_id=CASE,
    )
    return CaseDetail(CASE, BILLING, 4, epochs, events, (sent,), (flag,))
