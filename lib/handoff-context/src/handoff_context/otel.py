"""Put handoff elements on OpenTelemetry spans, so an agent already instrumented with
OpenTelemetry needs no reporter: its spans reach a handoff-trace service's ``POST /v1/traces``
through the OTLP exporter it already runs (``pip install 'handoff-context[otel]'``).

```python
from handoff_context.otel import put_on_span

with tracer.start_as_current_span("invoke_agent coder"):
    put_on_span(handoff)  # the handoff object the delegator sent or the delegate received
    ...
    put_on_span(status)   # a status object: one span event per status
```

Where the elements go (docs/otlp.md has the table):

- a handoff object (profile §1.4, ``{"offer": ..., "chain": [...]}``) becomes span
  attributes: ``handoff.element`` holds the offer (the compact JWS text, or the tagged
  COSE_Sign1 octets) and ``handoff.chain`` its chain, oldest first, when it has one;
- a status object (``{"status": ...}``) becomes a span event named ``handoff.status`` whose
  ``handoff.element`` attribute holds the status.

The elements travel exactly as signed (their octets are never re-encoded, profile §2), so
the service verifies them like any other carrier; the span's trace and span ids are hints
only and never stand in for a signature. ``received_by`` (the agent's own identifier) and
``dialog`` (the host's dialog id, A2A ``contextId``) say what a capture record would say
(profile §10): the receiver that judges the audience, and the dialog the element must name.

This is the only module of the library that imports OpenTelemetry (the ``otel`` extra).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from opentelemetry import trace
from opentelemetry.util.types import AttributeValue

__all__ = [
    "CHAIN_ATTRIBUTE",
    "DIALOG_ATTRIBUTE",
    "ELEMENT_ATTRIBUTE",
    "RECEIVED_BY_ATTRIBUTE",
    "STATUS_EVENT",
    "put_on_span",
]

ELEMENT_ATTRIBUTE = "handoff.element"
CHAIN_ATTRIBUTE = "handoff.chain"
RECEIVED_BY_ATTRIBUTE = "handoff.received_by"
# The GenAI semantic conventions' name for the dialog (A2A contextId).
DIALOG_ATTRIBUTE = "gen_ai.conversation.id"
STATUS_EVENT = "handoff.status"


def put_on_span(
    obj: Mapping[str, Any],
    *,
    span: trace.Span | None = None,
    received_by: str | None = None,
    dialog: str | None = None,
) -> None:
    """Put a handoff object or a status object on ``span`` (default: the current span).

    Raises TypeError for anything else (an object with both ``offer`` and ``status``, or an
    element that is neither text nor octets): the mistake is the caller's, and a span
    silently without its element would be worse."""
    target = span if span is not None else trace.get_current_span()
    has_offer, has_status = "offer" in obj, "status" in obj
    if has_offer == has_status:
        raise TypeError("put_on_span takes a handoff object (offer) or a status object (status)")
    if dialog is not None:
        target.set_attribute(DIALOG_ATTRIBUTE, dialog)
    if has_offer:
        attributes: dict[str, AttributeValue] = {ELEMENT_ATTRIBUTE: _element(obj["offer"])}
        chain = obj.get("chain")
        if chain:
            attributes[CHAIN_ATTRIBUTE] = _chain(chain)
        if received_by is not None:
            attributes[RECEIVED_BY_ATTRIBUTE] = received_by
        target.set_attributes(attributes)
        return
    event: dict[str, AttributeValue] = {ELEMENT_ATTRIBUTE: _element(obj["status"])}
    if received_by is not None:
        event[RECEIVED_BY_ATTRIBUTE] = received_by
    target.add_event(STATUS_EVENT, event)


def _element(value: object) -> str | bytes:
    if isinstance(value, str | bytes):
        return value
    raise TypeError(f"an element is compact JWS text or COSE octets, not {type(value).__name__}")


def _chain(chain: object) -> Sequence[str] | Sequence[bytes]:
    if not isinstance(chain, Sequence) or isinstance(chain, str | bytes):
        raise TypeError("a handoff object's chain is a list of elements")
    items = [_element(c) for c in chain]
    if all(isinstance(c, str) for c in items):
        return [c for c in items if isinstance(c, str)]
    if all(isinstance(c, bytes) for c in items):
        return [c for c in items if isinstance(c, bytes)]
    raise TypeError("a chain holds elements of one form: all JWS text or all COSE octets")
