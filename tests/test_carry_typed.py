"""The carry helpers take the SDKs' typed messages as they take dicts (issue 19 item 5): an
a2a-sdk 1.x protobuf ``Message``, ``Task``, ``SendMessageRequest`` or metadata ``Struct``, and
the mcp package's pydantic models, with no ``MessageToDict``/``ParseDict`` round trip by hand;
``put_*`` return the type they were given."""

from __future__ import annotations

from typing import Any

import mcp.types as mcp_types
import pytest
from a2a.types import a2a_pb2 as pb
from handoff_context import (
    Context,
    Form,
    Outcome,
    Verifier,
    carry,
    continue_handoff,
    handoff_object,
    make_offer,
    make_status,
    parse_object,
    status_object,
)
from parties import T0, World, make_world

DIALOG = "ctx-typed"


@pytest.fixture(scope="module")
def world() -> World:
    return make_world()


def _offer(world: World) -> dict[str, Any]:
    return handoff_object(make_offer(world.planner, aud=world.coder.iss, dialog=DIALOG, iat=T0))


def test_a_protobuf_message_carries_an_offer_and_is_found(world: World) -> None:
    offer = _offer(world)
    message = pb.Message(message_id="m1", context_id=DIALOG, role=pb.ROLE_USER)
    message.parts.add(text="plan the release")
    sent = carry.put_a2a(message, offer)
    assert isinstance(sent, pb.Message)
    assert list(sent.extensions) == [carry.A2A_EXTENSION_URI]
    assert not message.metadata  # the original is left alone
    request = pb.SendMessageRequest(message=sent)
    (found,) = carry.find(request)
    assert isinstance(found, carry.Found)
    assert (found.carrier, found.role, found.dialog) == (
        carry.Carrier.A2A_1_0,
        carry.Role.OFFER,
        DIALOG,
    )
    # The Struct as it sits in the typed metadata is accepted by the verifier and by
    # continue_handoff, unconverted.
    struct = sent.metadata[carry.A2A_EXTENSION_URI]
    ctx = Context(now=T0 + 1, receiver=world.coder.iss, dialog=DIALOG)
    verdict = Verifier(world.trust).verify_value(struct, ctx, source="struct")
    assert verdict.outcome is Outcome.ACCEPT, verdict.detail
    onward = continue_handoff(world.coder, struct, aud=world.tester.iss, iat=T0 + 2)
    assert len(onward["chain"]) == 1


def test_a_protobuf_task_carries_a_status(world: World) -> None:
    offer = _offer(world)
    octets = parse_object(offer).offer
    status = status_object(
        make_status(world.coder, offer_octets=octets, state="completed", iat=T0 + 5)
    )
    reply = carry.put_a2a(pb.Message(message_id="m2", role=pb.ROLE_AGENT), status)
    assert isinstance(reply, pb.Message) and not reply.extensions
    task = pb.Task(id="t-1", context_id=DIALOG)
    task.status.state = pb.TASK_STATE_COMPLETED
    task.status.message.CopyFrom(reply)
    (found,) = carry.find(pb.StreamResponse(task=task))
    assert isinstance(found, carry.Found)
    assert (found.role, found.task_id, found.task_state) == (
        carry.Role.STATUS,
        "t-1",
        "TASK_STATE_COMPLETED",
    )
    verifier = Verifier(world.trust)
    verifier.remember_offer(octets)
    verdict = verifier.verify_value(found.value, Context(now=T0 + 5), source="t")
    assert verdict.outcome is Outcome.ACCEPT and verdict.state is not None


def test_a_protobuf_cancel_request_carries_a_canceled(world: World) -> None:
    offer = _offer(world)
    octets = parse_object(offer).offer
    canceled = status_object(
        make_status(world.planner, offer_octets=octets, state="canceled", iat=T0 + 5)
    )
    request = carry.put_a2a(pb.CancelTaskRequest(id="t-1"), canceled)
    assert isinstance(request, pb.CancelTaskRequest)
    assert dict(request.metadata[carry.A2A_EXTENSION_URI]) == canceled


def test_mcp_models_carry_and_are_found(world: World) -> None:
    offer = _offer(world)
    params = mcp_types.CallToolRequestParams(name="lint", arguments={"path": "a.py"})
    sent = carry.put_mcp(params, offer)
    assert isinstance(sent, mcp_types.CallToolRequestParams)
    assert sent.meta is not None and sent.meta[carry.MCP_META_KEY] == offer
    request = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": sent}
    (found,) = carry.find({**request, "params": sent.model_dump(by_alias=True)})
    assert isinstance(found, carry.Found) and found.role is carry.Role.OFFER
    result = carry.put_mcp(
        mcp_types.CallToolResult(content=[]),
        status_object(
            make_status(
                world.coder, offer_octets=parse_object(offer).offer, state="accepted", iat=T0
            )
        ),
    )
    assert isinstance(result, mcp_types.CallToolResult)
    assert result.meta is not None and "status" in result.meta[carry.MCP_META_KEY]


def test_the_cose_form_does_not_fit_a_json_carrier(world: World) -> None:
    cose = handoff_object(
        make_offer(world.planner, aud=world.coder.iss, dialog=DIALOG, iat=T0, form=Form.COSE)
    )
    with pytest.raises(ValueError, match="JWS form"):
        carry.put_a2a(pb.Message(message_id="m"), cose)
    with pytest.raises(ValueError, match="a2a-sdk message"):
        carry.put_a2a(42, _offer(world))  # type: ignore[call-overload]
