"""``handoff_context.otel.put_on_span`` (the ``[otel]`` extra): a handoff object becomes span
attributes, a status object a span event, with the elements exactly as signed."""

from __future__ import annotations

import pytest

pytest.importorskip("opentelemetry.sdk", reason="the [otel] extra's tests need opentelemetry-sdk")

from handoff_context import (
    Form,
    StatusState,
    handoff_object,
    make_offer,
    make_status,
    status_object,
)
from handoff_context.otel import put_on_span
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
    InMemorySpanExporter,
)
from parties import T0, World


def spans_of(run: object) -> list[ReadableSpan]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    try:
        run(provider.get_tracer("test"))  # type: ignore[operator]
        return list(exporter.get_finished_spans())
    finally:
        provider.shutdown()


def test_an_offer_with_its_chain_and_a_status_on_the_current_span(world: World) -> None:
    first = make_offer(world.planner, aud=world.coder.iss, dialog="ctx-1", iat=T0)
    second = make_offer(world.coder, aud=world.tester.iss, dialog="ctx-1", iat=T0)
    accepted = make_status(
        world.tester, offer_octets=second, state=StatusState.ACCEPTED, iat=T0 + 1
    )

    def run(tracer: object) -> None:
        with tracer.start_as_current_span("invoke_agent tester"):  # type: ignore[attr-defined]
            put_on_span(
                handoff_object(second, [first]), received_by=world.tester.iss, dialog="ctx-1"
            )
            put_on_span(status_object(accepted), received_by=world.coder.iss)

    (span,) = spans_of(run)
    assert span.attributes is not None
    assert span.attributes["handoff.element"] == second.decode()
    assert tuple(span.attributes["handoff.chain"]) == (first.decode(),)  # type: ignore[arg-type]
    assert span.attributes["handoff.received_by"] == world.tester.iss
    assert span.attributes["gen_ai.conversation.id"] == "ctx-1"
    (event,) = span.events
    assert event.name == "handoff.status"
    assert event.attributes == {
        "handoff.element": accepted.decode(),
        "handoff.received_by": world.coder.iss,
    }


def test_cose_elements_ride_as_octets(world: World) -> None:
    octets = make_offer(world.planner, aud=world.coder.iss, dialog="ctx-2", iat=T0, form=Form.COSE)

    def run(tracer: object) -> None:
        with tracer.start_as_current_span("s") as span:  # type: ignore[attr-defined]
            put_on_span(handoff_object(octets, form=Form.COSE), span=span)

    (span,) = spans_of(run)
    assert span.attributes is not None and span.attributes["handoff.element"] == octets


@pytest.mark.parametrize(
    "obj",
    [{}, {"offer": "a", "status": "b"}, {"offer": 7}, {"offer": "a", "chain": "b"},
     {"offer": "a", "chain": ["b", b"c"]}],
)  # fmt: skip
def test_anything_else_is_a_type_error(obj: dict[str, object]) -> None:
    with pytest.raises(TypeError):
        put_on_span(obj)
