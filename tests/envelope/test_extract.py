"""Finding envelope items in captured payloads: A2A 1.0 and 0.3 shapes built with the real
a2a-sdk types, JSON-RPC requests and responses, update events, capture records, and the
ways a message can fail (schema, envelope count, version drift)."""

from __future__ import annotations

from typing import Any

from a2a.compat.v0_3 import types as a2a03
from a2a.types import a2a_pb2 as pb
from google.protobuf import json_format

from app.envelope.extract import COUNT_ERROR, ItemKind, find_items
from tests.conftest import T0

from .builders import (
    BILLING,
    CASE,
    TRIAGE,
    V2,
    answer,
    envelope,
    event,
    message_v03,
    message_v1,
    record,
    reference,
    response,
    send_v03,
    send_v1,
    task_v03,
    task_v1,
)


def items(payload: Any) -> list[Any]:
    return find_items(payload, source="test")


def test_a_1_0_send_message_is_a_handoff_to_its_receiver() -> None:
    [item] = items(record(send_v1(message_v1(context_id="ctx-t")), T0, BILLING))
    assert item.kind is ItemKind.HANDOFF
    assert (item.case_id, item.handoff_id, item.agent) == (CASE, f"{CASE}:4", TRIAGE)
    assert (item.to_agent, item.at, item.context_id) == (BILLING, T0, "ctx-t")
    assert item.epoch == 3 and isinstance(item.epoch, int)  # protobuf made it 3.0
    assert item.media_type == V2 and item.errors == ()
    [url] = item.urls
    assert url.filename == "transcript.txt" and isinstance(url.sha256, str)
    assert item.text_bytes == len(b"Handoff of case C-1001. Accept or reject.")


def test_a_0_3_message_send_is_read_the_same_way() -> None:
    [item] = items(record(send_v03(message_v03()), T0, BILLING))
    assert item.kind is ItemKind.HANDOFF
    assert (item.case_id, item.epoch, item.to_agent, item.media_type) == (CASE, 3, BILLING, V2)
    [url] = item.urls
    assert url.filename == "transcript.txt" and url.media_type == "text/plain"


def test_a_bare_message_without_a_record_has_no_receiver_or_time() -> None:
    [item] = items(message_v1())
    assert item.kind is ItemKind.HANDOFF and item.to_agent is None and item.at is None


def test_acceptances_in_1_0_and_0_3_tasks() -> None:
    for task in (task_v1(answer(True)), task_v03(answer(True))):
        [item] = items(record(response(task), T0, TRIAGE))
        assert item.kind is ItemKind.ACCEPTED
        assert (item.case_id, item.epoch, item.handoff_id, item.task_id) == (
            CASE,
            4,
            f"{CASE}:4",
            "task-9",
        )


def test_a_1_0_send_message_response_wrapping_a_task() -> None:
    wrapped = {"task": task_v1(answer(True))}
    json_format.ParseDict(wrapped, pb.SendMessageResponse())  # the SDK's shape
    [item] = items(response(wrapped))
    assert item.kind is ItemKind.ACCEPTED


def test_a_rejection_with_its_reason_in_a_0_3_status_update() -> None:
    data = answer(False, epoch=None, reason="payment P-2 unknown")
    update = a2a03.TaskStatusUpdateEvent(
        task_id="task-9",
        context_id="billing-ctx",
        final=True,
        status=a2a03.TaskStatus(
            state=a2a03.TaskState.rejected,
            message=a2a03.Message(
                message_id="r-1",
                role=a2a03.Role.agent,
                parts=[a2a03.Part(root=a2a03.DataPart(data=data))],
            ),
        ),
    ).model_dump(mode="json", by_alias=True, exclude_none=True)
    [item] = items(response(update))
    assert item.kind is ItemKind.REJECTED
    assert (item.detail, item.task_id) == ("payment P-2 unknown", "task-9")


def test_an_acceptance_in_a_1_0_artifact_update_event() -> None:
    event_ = json_format.MessageToDict(
        json_format.ParseDict(
            {
                "artifactUpdate": {
                    "taskId": "task-9",
                    "contextId": "billing-ctx",
                    "artifact": {"artifactId": "a", "parts": [{"data": answer(True)}]},
                }
            },
            pb.StreamResponse(),
        )
    )
    [item] = items(response(event_))
    assert item.kind is ItemKind.ACCEPTED and item.epoch == 4


def test_an_acceptance_in_a_failed_task_is_an_error() -> None:
    [item] = items(response(task_v1(answer(True), state="TASK_STATE_FAILED")))
    assert item.kind is ItemKind.INVALID
    assert "not completed" in item.errors[0]


def test_an_acceptance_without_its_epoch_is_an_error() -> None:
    [item] = items(response(task_v1(answer(True, epoch=None))))
    assert item.kind is ItemKind.INVALID and item.errors[0].startswith("epoch:")


def test_a_handoff_in_a_task_history_has_no_known_receiver() -> None:
    task = task_v1(answer(True))
    task["history"] = [message_v1()]
    found = items(record(response(task), T0, TRIAGE))
    assert [i.kind for i in found] == [ItemKind.HANDOFF, ItemKind.ACCEPTED]
    assert found[0].to_agent is None and found[0].task_id == "task-9"


def test_two_envelopes_in_one_message_are_an_error() -> None:
    msg = message_v1(extra_data=[(envelope(epoch=5), V2)])
    [item] = items(send_v1(msg))
    assert item.kind is ItemKind.INVALID
    assert item.errors == (f"{COUNT_ERROR}, found 2",)


def test_a_newer_version_alone_is_drift_and_not_read() -> None:
    v3 = "application/vnd.acme.handoff.v3+json"
    [item] = items(send_v1(message_v1(envelope(priority="high"), media_type=v3)))
    assert item.kind is ItemKind.INVALID
    assert (item.drift, item.errors, item.case_id, item.agent) == ((v3,), (), CASE, TRIAGE)


def test_drift_beside_an_accepted_envelope_is_reported_and_the_envelope_read() -> None:
    v3 = "application/vnd.acme.handoff.v3+json"
    [item] = items(send_v1(message_v1(extra_data=[(envelope(), v3)])))
    assert item.kind is ItemKind.HANDOFF and item.drift == (v3,)


def test_a_configured_version_is_accepted() -> None:
    v3 = "application/vnd.acme.handoff.v3+json"
    payload = send_v1(message_v1(media_type=v3))
    [item] = find_items(payload, source="t", accepted=frozenset({v3}))
    # Accepted by configuration, but the shipped schema is version 2's: it still validates.
    assert item.kind is ItemKind.HANDOFF and item.drift == ()


def test_a_schema_failure_names_the_first_three_violations() -> None:
    bad = envelope(goal=None, done="all of it", epoch=-1, summary=7)
    [item] = items(send_v1(message_v1(bad)))
    assert item.kind is ItemKind.INVALID
    assert len(item.errors) == 3
    assert item.errors[0] == "(envelope): 'goal' is a required property"
    assert any(e.startswith("done:") for e in item.errors)


def test_a_fact_without_a_source_is_no_schema_error() -> None:
    facts = [{"key": "amount", "value": "49.90", "source": None, "verified": False}]
    [item] = items(send_v1(message_v1(envelope(facts=facts))))
    assert item.kind is ItemKind.HANDOFF


def test_messages_without_an_envelope_are_not_envelope_items() -> None:
    plain = json_format.MessageToDict(
        json_format.ParseDict(
            {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "hello"}]}, pb.Message()
        )
    )
    other_data = message_v1(media_type="application/json")
    assert items(send_v1(plain)) == []
    assert items(send_v1(other_data)) == []
    assert items(response(task_v1({"result": "done"}))) == []
    assert items([1, "x", None]) == []


def test_url_parts_without_metadata_are_kept_for_the_missing_hash_check() -> None:
    msg = message_v1(urls=[reference(sha256=None, size=None)])
    [item] = items(send_v1(msg))
    [url] = item.urls
    assert url.sha256 is None


def test_case_events_and_their_errors() -> None:
    [ok] = items(record(event(TRIAGE, "write", T0 + 5.7, epoch=3, outcome="applied"), T0 + 9))
    assert ok.kind is ItemKind.EVENT
    assert (ok.at, ok.agent, ok.action, ok.epoch, ok.outcome) == (
        T0 + 5,
        TRIAGE,
        "write",
        3,
        "applied",
    )
    bad = {"case_event": {"case_id": CASE, "agent": TRIAGE, "action": "delete", "at": "soon"}}
    [item] = items(bad)
    assert item.kind is ItemKind.INVALID
    assert [e.split(":")[0] for e in item.errors] == ["case_event.action", "case_event.at"]


def test_a_batch_names_each_item() -> None:
    found = find_items([send_v1(message_v1()), event(TRIAGE, "act", T0)], source="req")
    assert [i.source for i in found] == ["req[0]", "req[1]"]


def test_media_type_parameters_and_case_do_not_matter() -> None:
    [item] = items(
        send_v1(message_v1(media_type="Application/VND.acme.handoff.v2+json; charset=utf-8"))
    )
    assert item.kind is ItemKind.HANDOFF and item.media_type == V2


def test_any_vendor_or_unversioned_handoff_type_is_drift() -> None:
    for media in ("application/vnd.other.handoff.v2+json", "application/vnd.acme.handoff+json"):
        [item] = items(send_v1(message_v1(media_type=media)))
        assert (item.kind, item.drift) == (ItemKind.INVALID, (media,))
