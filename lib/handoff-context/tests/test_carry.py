"""``handoff_context.carry``: what ``put_a2a`` and ``put_mcp`` put in, ``find`` finds again,
with the carrier and role of the place it sat (profile §9). The service's tests drive the same
code with messages built by the real a2a-sdk and mcp packages (tests/test_carriers.py)."""

from __future__ import annotations

from typing import Any

import pytest
from handoff_context import carry, handoff_object, make_offer, make_status, status_object
from handoff_context.carry import A2A_EXTENSION_URI, MCP_META_KEY, Carrier, Found, Role
from parties import T0, World


@pytest.fixture
def objects(world: World) -> tuple[dict[str, Any], dict[str, Any]]:
    offer = make_offer(world.planner, aud=world.coder.iss, dialog="ctx-1", iat=T0)
    status = make_status(world.coder, offer_octets=offer, state="accepted", iat=T0)
    return handoff_object(offer), status_object(status)


def _one(message: object) -> Found:
    (found,) = carry.find(message)
    assert isinstance(found, Found), found
    return found


def _rpc(method: str, params: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}


def test_a2a_1_0_send_and_reply(objects: tuple[dict[str, Any], dict[str, Any]]) -> None:
    offer, status = objects
    message = {"messageId": "m1", "contextId": "ctx-1", "role": "ROLE_USER", "parts": []}
    sent = carry.put_a2a(message, offer)
    assert sent["extensions"] == [A2A_EXTENSION_URI] and "metadata" not in message
    found = _one(_rpc("SendMessage", {"message": sent}))
    assert (found.value, found.carrier, found.role, found.dialog) == (
        offer,
        Carrier.A2A_1_0,
        Role.OFFER,
        "ctx-1",
    )
    reply = carry.put_a2a({"messageId": "m2", "contextId": "ctx-1", "role": "ROLE_AGENT"}, status)
    assert "extensions" not in reply
    found = _one({"jsonrpc": "2.0", "id": 1, "result": {"message": reply}})
    assert (found.value, found.role, found.where) == (status, Role.STATUS, "message.metadata")


def test_a2a_0_3_task_and_cancel(objects: tuple[dict[str, Any], dict[str, Any]]) -> None:
    offer, status = objects
    sent = carry.put_a2a({"kind": "message", "messageId": "m1", "role": "user"}, offer)
    assert _one(_rpc("message/send", {"message": sent})).carrier is Carrier.A2A_0_3
    reply = carry.put_a2a({"kind": "message", "messageId": "m2", "role": "agent"}, status)
    task = {"kind": "task", "id": "t-1", "contextId": "ctx-1", "status": {"state": "working"}}
    task["status"]["message"] = reply
    found = _one({"jsonrpc": "2.0", "id": 1, "result": task})
    assert (found.task_id, found.task_state, found.dialog) == (
        "t-1",
        "TASK_STATE_WORKING",
        "ctx-1",
    )
    cancel = _one(_rpc("tasks/cancel", carry.put_a2a({"id": "t-1"}, status)))
    assert (cancel.role, cancel.task_id, cancel.where) == (Role.CANCEL, "t-1", "params.metadata")


def test_mcp_call_result_and_cancel(objects: tuple[dict[str, Any], dict[str, Any]]) -> None:
    offer, status = objects
    params = carry.put_mcp({"name": "run", "arguments": {}, "_meta": {"progressToken": 1}}, offer)
    assert params["_meta"] == {"progressToken": 1, MCP_META_KEY: offer}
    found = _one(_rpc("tools/call", params))
    assert (found.carrier, found.role, found.where) == (Carrier.MCP, Role.OFFER, "params._meta")
    result = carry.put_mcp({"content": [], "isError": False}, status)
    assert _one({"jsonrpc": "2.0", "id": 1, "result": result}).role is Role.STATUS
    note = _rpc("notifications/cancelled", carry.put_mcp({"requestId": 1}, status))
    assert _one(note).role is Role.CANCEL


def test_a_bare_object_is_its_own_carrier(objects: tuple[dict[str, Any], dict[str, Any]]) -> None:
    offer, status = objects
    assert (_one(offer).carrier, _one(offer).role) == (Carrier.RAW, Role.OFFER)
    assert _one(status).role is Role.STATUS


def test_putting_twice_lists_the_extension_once(
    objects: tuple[dict[str, Any], dict[str, Any]],
) -> None:
    offer, _ = objects
    once = carry.put_a2a({"messageId": "m1", "extensions": ["urn:other"]}, offer)
    twice = carry.put_a2a(once, offer)
    assert twice["extensions"] == ["urn:other", A2A_EXTENSION_URI]


def test_bad_carrying_places_are_unreadable_and_nothing_raises() -> None:
    bad = {"messageId": "m1", "role": "ROLE_USER", "metadata": {A2A_EXTENSION_URI: "text"}}
    assert carry.find(_rpc("SendMessage", {"message": bad})) == [
        carry.Unreadable("the handoff entry in message.metadata is a string, not an object")
    ]
    assert carry.find([1]) == [carry.Unreadable("the payload is an array, not an object")]
    assert carry.find({"jsonrpc": "2.0", "id": 1, "error": {"code": 1}}) == []
    assert carry.find(_rpc("tools/call", {"name": "x"})) == []


def test_find_all_reads_host_task_states_that_carry_no_element(
    objects: tuple[dict[str, Any], dict[str, Any]],
) -> None:
    _, status = objects
    update = {"taskId": "t-1", "contextId": "ctx-1", "status": {"state": "TASK_STATE_CANCELED"}}
    assert carry.find({"statusUpdate": update}) == []  # find keeps its old answer
    assert carry.find_all({"statusUpdate": update}) == [
        carry.TaskState(Carrier.A2A_1_0, "t-1", "TASK_STATE_CANCELED", "ctx-1")
    ]
    # A status that rides in the task says its state itself: no separate task state.
    reply = carry.put_a2a({"messageId": "m2", "role": "ROLE_AGENT"}, status)
    task = {"id": "t-1", "contextId": "ctx-1", "status": {"state": "working", "message": reply}}
    (found,) = carry.find_all({"kind": "task", **task})
    assert isinstance(found, Found) and found.task_state == "TASK_STATE_WORKING"


def test_find_all_reads_an_http_json_cancel_by_its_path(
    objects: tuple[dict[str, Any], dict[str, Any]],
) -> None:
    _, status = objects
    body = carry.put_a2a({}, status)  # the HTTP+JSON binding: the params, no JSON-RPC envelope
    assert carry.find_all(body, path="/v1/tasks/t%2D1:send") == []
    (found,) = carry.find_all(body, path="/tenant/v1/tasks/t%2D1:cancel")
    assert isinstance(found, Found)
    assert (found.role, found.task_id, found.carrier) == (Role.CANCEL, "t-1", Carrier.A2A_1_0)
