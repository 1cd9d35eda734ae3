"""The a2a-sdk integration (``pip install 'handoff-context[a2a]'``): agents that sign, check,
refuse and answer handoffs on their own.

```python
agent = Agent(Signer.load("keys/coder.jwk"), TrustStore.load("trust.json"), reporter=reporter)
handler = HandoffRequestHandler(agent, CoderExecutor(), InMemoryTaskStore(), card)  # server
coder = HandoffClient(agent, ClientFactory(config).create(coder_card), to=CODER_ID)  # client
```

**Server side.** ``HandoffRequestHandler`` is the SDK's ``DefaultRequestHandler`` with the
same arguments after the ``Agent``. Before the executor runs, the offer in the message's
metadata (profile §9) is checked with this agent as the receiver (profile §6, §7, §5):

- a failing offer is refused with ``InvalidParamsError`` (JSON-RPC -32602, which the SDK's
  clients raise as ``a2a.utils.errors.InvalidParamsError``) whose ``data`` holds the
  profile ``reason``, the ``detail`` and, where the profile allows one, the signed
  ``rejected`` (``status``, a compact JWS); the executor never sees the request;
- a retransmission (the same offer octets again, profile §6.4) is answered with a Message
  carrying the last status this agent signed for it, octet for octet (none while it has
  signed nothing), and the work is not run again;
- an accepted offer runs: the task's own state changes become signed statuses (working:
  ``accepted``; completed, failed, rejected), put into the status message's metadata with
  no code in the executor; an executor that raises gets a signed ``failed``.
  ``took_effect(refs)`` names what a failing task did.

``CancelTask`` must carry the delegator's signed ``canceled`` for a task that arrived with
an offer (enforce); it reaches the executor's ``cancel``, and every delegation the task made
through a ``HandoffClient`` is canceled in turn with a signed ``canceled`` (profile §8).

**Client side.** ``HandoffClient`` wraps an SDK client for one remote agent (``to``, its
identifier). ``send_message`` signs an offer for each new delegation, continuing the handoff
of the task it runs in (prev and chain, profile §7); the statuses that come back are checked
and kept on ``last`` (a ``Delegation``: ``state``, ``verdict``). When the exchange fails
before the reply came (a dropped connection, a timeout) or the reply carries neither a
status nor a task, it sends the identical request again, offer octets unchanged (a re-signed
offer would be equivocation), after waits that double from ``first_wait``.

Choices where the profile is silent: a message that names an existing task (a follow-up of
an ``input-required`` task) needs no offer of its own; a request without any offer is
refused (``policy``) in enforce mode.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections import OrderedDict
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

from a2a.client import Client
from a2a.client.errors import A2AClientError
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.context import ServerCallContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.tasks import TaskUpdater
from a2a.types import a2a_pb2 as pb
from a2a.utils.errors import InvalidParamsError
from google.protobuf import json_format  # type: ignore[import-untyped,unused-ignore]

from handoff_context._model import StatusState
from handoff_context._sign import status_object
from handoff_context._verdict import Outcome
from handoff_context.agent import (
    Agent,
    Decision,
    Delegation,
    Mode,
    Received,
    enter,
    leave,
    took_effect,
)
from handoff_context.carry import A2A_EXTENSION_URI
from handoff_context.errors import Reason

__all__ = [
    "HandoffClient",
    "HandoffRequestHandler",
    "check_refusal",
    "check_reply_event",
    "refused",
    "retransmission_reply",
    "sign_task_status",
    "took_effect",
]

log = logging.getLogger("handoff_context.a2a")

# Profile §8: the A2A task states whose change the delegate signs.
_SIGNED = {
    pb.TaskState.TASK_STATE_WORKING: StatusState.ACCEPTED,
    pb.TaskState.TASK_STATE_COMPLETED: StatusState.COMPLETED,
    pb.TaskState.TASK_STATE_FAILED: StatusState.FAILED,
    pb.TaskState.TASK_STATE_REJECTED: StatusState.REJECTED,
}
_KEEP_TASKS = 10_000  # tasks whose offer is kept for a later cancel


def carried(metadata: Any) -> Any:
    """What the metadata Struct holds under the extension key (profile §9), or None."""
    if A2A_EXTENSION_URI not in metadata:
        return None
    return json_format.MessageToDict(metadata).get(A2A_EXTENSION_URI)


def _put(metadata: Any, value: dict[str, Any]) -> None:
    metadata.update({A2A_EXTENSION_URI: value})


def refused(decision: Decision) -> InvalidParamsError:
    """The SDK error a refused offer is answered with; its ``data`` names the reason."""
    data = {"reason": decision.reason or Reason.POLICY.value, "detail": decision.detail or ""}
    if decision.status is not None:
        data["status"] = decision.status.decode("ascii")
    return InvalidParamsError(
        message=f"handoff refused ({data['reason']}): {data['detail']}", data=data
    )


def retransmission_reply(decision: Decision, *, context_id: str, task_id: str | None) -> pb.Message:
    """The answer to a retransmission (profile §6.4): a Message carrying the last status
    signed for the offer, octet for octet (none while nothing was signed)."""
    reply = pb.Message(
        message_id=uuid.uuid4().hex,
        role=pb.Role.ROLE_AGENT,
        context_id=context_id,
        parts=[pb.Part(text="retransmission")],
    )
    if decision.answer is not None:
        _put(reply.metadata, status_object(decision.answer))
    if task_id is not None:
        reply.task_id = task_id
    return reply


class _SigningQueue(EventQueue):
    """The executor's event queue: every task state change the profile maps to a status
    (profile §8) leaves with that signed status in its status message's metadata."""

    def __init__(self, inner: EventQueue, agent: Agent, received: Received) -> None:
        self._inner = inner
        self._agent = agent
        self._received = received

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def enqueue_event(self, event: Any) -> None:
        if isinstance(event, pb.TaskStatusUpdateEvent | pb.Task):
            self._sign(event.status, task_id=_task_id(event), context_id=event.context_id)
        await self._inner.enqueue_event(event)

    def _sign(self, status: pb.TaskStatus, *, task_id: str, context_id: str) -> None:
        sign_task_status(
            self._agent, self._received, status, task_id=task_id, context_id=context_id
        )


def sign_task_status(
    agent: Agent, received: Received, status: pb.TaskStatus, *, task_id: str, context_id: str
) -> bool:
    """Put the signed status the profile maps ``status``'s task state to (profile §8:
    working -> ``accepted``; completed, failed, rejected) into its message's metadata, once
    per state. Shared by this module's event queue and ``handoff-trace tap --enforce``,
    which sees the same states in the upstream's answers. True when it signed one."""
    state = _SIGNED.get(status.state)
    if state is None:
        return False
    reason = Reason.POLICY.value if state is StatusState.REJECTED else None
    octets = agent.answer(received, state, reason=reason)
    if octets is None:
        return False
    if not status.HasField("message"):
        status.message.CopyFrom(
            pb.Message(
                message_id=uuid.uuid4().hex,
                role=pb.Role.ROLE_AGENT,
                task_id=task_id,
                context_id=context_id,
                parts=[pb.Part(text=state.value)],
            )
        )
    _put(status.message.metadata, status_object(octets))
    return True


def _task_id(event: pb.TaskStatusUpdateEvent | pb.Task) -> str:
    return event.id if isinstance(event, pb.Task) else event.task_id


class _GuardedExecutor(AgentExecutor):
    """Runs the agent's executor inside the offer it took on (the context variable the
    client side continues) with a signing event queue."""

    def __init__(self, inner: AgentExecutor, handler: HandoffRequestHandler) -> None:
        self.inner = inner
        self.handler = handler

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        message_id = context.message.message_id if context.message is not None else ""
        received = self.handler._admitted.pop(message_id, None)
        if received is None:
            received = self.handler._tasks.get(context.task_id or "")
        if received is None:
            await self.inner.execute(context, event_queue)
            return
        if context.task_id:
            received.task_id = context.task_id
            self.handler._keep(context.task_id, received)
        token = enter(received)
        queue = _SigningQueue(event_queue, self.handler.agent, received)
        try:
            await self.inner.execute(context, queue)
        except Exception:
            # Profile §8: work that crashed has failed; the delegator gets a signed failed
            # rather than a lost outcome. The SDK then records the failure as it always does
            # (the task is already final, so it writes nothing more).
            await _fail(queue, context, received)
            raise
        finally:
            leave(token)

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        received = self.handler._tasks.get(context.task_id or "")
        if received is None:
            await self.inner.cancel(context, event_queue)
            return
        await self.inner.cancel(context, _SigningQueue(event_queue, self.handler.agent, received))


async def _fail(queue: _SigningQueue, context: RequestContext, received: Received) -> None:
    final = {StatusState.COMPLETED, StatusState.FAILED, StatusState.REJECTED}
    if received.signed & final or not (context.task_id and context.context_id):
        return
    try:
        await TaskUpdater(queue, context.task_id, context.context_id).failed()
    except Exception:  # the SDK may refuse an update for a task it never saw: log only
        log.warning("handoff: could not record the failure of task %s", context.task_id)


class HandoffRequestHandler(DefaultRequestHandler):
    """``DefaultRequestHandler`` that checks offers before the executor runs and answers
    with signed statuses (see the module docstring). Takes the ``Agent``, then exactly the
    arguments of ``DefaultRequestHandler``."""

    def __init__(self, agent: Agent, agent_executor: AgentExecutor, *args: Any, **kwargs: Any):
        self.agent = agent
        self._admitted: dict[str, Received] = {}
        self._tasks: OrderedDict[str, Received] = OrderedDict()
        self._by_offer: dict[bytes, str] = {}  # offer digest -> its task, for retransmissions
        super().__init__(_GuardedExecutor(agent_executor, self), *args, **kwargs)

    def _keep(self, task_id: str, received: Received) -> None:
        self._tasks[task_id] = received
        self._tasks.move_to_end(task_id)
        self._by_offer[received.offer.digest] = task_id
        while len(self._tasks) > _KEEP_TASKS:
            _, dropped = self._tasks.popitem(last=False)
            self._by_offer.pop(dropped.offer.digest, None)

    def _admit(self, params: pb.SendMessageRequest) -> pb.Message | None:
        """None to run the request; a Message answering a retransmission; raises the SDK
        error for a refused offer (before any task exists)."""
        message = params.message
        value = carried(message.metadata)
        dialog = message.context_id or None
        if value is None:
            if message.task_id and message.task_id in self._tasks:
                return None  # a follow-up message of a task that arrived with an offer
            decision = self.agent.refuse_missing(dialog=dialog)
        else:
            decision = self.agent.check_offer(value, dialog=dialog)
        if decision.run:
            if decision.received is not None:
                self._admitted[message.message_id] = decision.received
            return None
        if decision.retransmission:
            # The task the first delivery started, while this process knows it: the
            # delegator can follow it for the statuses still to come.
            task_id = self._by_offer.get(decision.verdict.digest or b"")
            return retransmission_reply(decision, context_id=message.context_id, task_id=task_id)
        raise refused(decision)

    async def on_message_send(
        self, params: pb.SendMessageRequest, context: ServerCallContext
    ) -> pb.Task | pb.Message:
        early = self._admit(params)
        if early is not None:
            return early
        try:
            answer: pb.Task | pb.Message = await super().on_message_send(params, context)
            return answer
        finally:
            self._admitted.pop(params.message.message_id, None)

    async def on_message_send_stream(
        self, params: pb.SendMessageRequest, context: ServerCallContext
    ) -> AsyncGenerator[Any, None]:
        early = self._admit(params)
        if early is not None:
            yield early
            return
        try:
            async for event in super().on_message_send_stream(params, context):
                yield event
        finally:
            self._admitted.pop(params.message.message_id, None)

    async def on_cancel_task(
        self, params: pb.CancelTaskRequest, context: ServerCallContext
    ) -> pb.Task | None:
        received = self._tasks.get(params.id)
        if received is not None:
            value = carried(params.metadata)
            if value is None:
                verdict_reason, detail = (
                    Reason.POLICY.value,
                    "the cancel carries no signed canceled",
                )
                ok = False
            else:
                verdict = self.agent.check_cancel(received, value)
                ok = verdict.outcome in (Outcome.ACCEPT, Outcome.DUPLICATE)
                verdict_reason = verdict.reason.value if verdict.reason else Reason.POLICY.value
                detail = verdict.detail or ""
            if not ok and self.agent.mode is Mode.ENFORCE:
                raise InvalidParamsError(
                    message=f"cancel refused ({verdict_reason}): {detail}",
                    data={"reason": verdict_reason, "detail": detail},
                )
        if received is not None:
            # Profile §8: the delegations below are canceled first, while the executor (and
            # the clients it delegated with) still runs; then this task.
            await self.agent.propagate_cancel(received)
        task: pb.Task | None = await super().on_cancel_task(params, context)
        return task


class HandoffClient:
    """An SDK ``Client`` for one remote agent ``to`` that signs, retransmits and checks
    (see the module docstring). Every other call goes to the wrapped client unchanged."""

    def __init__(
        self,
        agent: Agent,
        client: Client,
        *,
        to: str,
        retries: int = 4,
        first_wait: float = 0.25,
    ) -> None:
        self.agent = agent
        self.client = client
        self.to = to
        self.retries = retries
        self.first_wait = first_wait
        self.last: Delegation | None = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self.client, name)

    async def __aenter__(self) -> HandoffClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.client.close()

    async def send_message(
        self, request: pb.SendMessageRequest, **kwargs: Any
    ) -> AsyncIterator[pb.StreamResponse]:
        """The wrapped client's ``send_message`` with a signed offer in the message.
        Raises ChainWindowError (before anything is sent) when the task's offer is no
        longer live; the SDK's errors as the wrapped client raises them, a refusal
        included (``InvalidParamsError``, recorded on ``last.refusal``)."""
        message = request.message
        delegation = self.agent.delegate(self.to, dialog=message.context_id or None)
        self.last = delegation
        _put(message.metadata, delegation.handoff)
        if A2A_EXTENSION_URI not in message.extensions:
            message.extensions.append(A2A_EXTENSION_URI)
        delegation.cancel = self._canceler(delegation)
        for attempt in range(self.retries + 1):
            try:
                async for event in self.client.send_message(request, **kwargs):
                    self._observe(delegation, event)
                    yield event
            except InvalidParamsError as exc:
                self._refusal(delegation, exc)
                raise
            except A2AClientError:
                if attempt == self.retries:
                    raise
                log.info("handoff: no reply from %s, retransmitting the offer", self.to)
            else:
                if delegation.statuses or delegation.task_id:
                    return
                if attempt == self.retries:
                    return
            await asyncio.sleep(self.first_wait * 2**attempt)

    async def delegate(self, request: pb.SendMessageRequest, **kwargs: Any) -> Delegation:
        """``send_message`` to its end; returns the delegation with its state."""
        async for _ in self.send_message(request, **kwargs):
            pass
        assert self.last is not None
        return self.last

    def _observe(self, delegation: Delegation, event: pb.StreamResponse) -> None:
        check_reply_event(self.agent, delegation, event)

    def _refusal(self, delegation: Delegation, exc: InvalidParamsError) -> None:
        check_refusal(self.agent, delegation, exc.data)

    def _canceler(self, delegation: Delegation) -> Any:
        async def cancel(status: bytes) -> None:
            if not delegation.task_id:
                return
            request = pb.CancelTaskRequest(id=delegation.task_id)
            _put(request.metadata, status_object(status))
            await self.client.cancel_task(request)

        return cancel

    async def cancel(self, delegation: Delegation | None = None) -> pb.Task | None:
        """Cancel ``delegation`` (the last by default) with a signed canceled."""
        delegation = delegation or self.last
        if delegation is None or not delegation.task_id:
            return None
        status = self.agent.sign_cancel(delegation)
        request = pb.CancelTaskRequest(id=delegation.task_id)
        _put(request.metadata, status_object(status))
        task = await self.client.cancel_task(request)
        delegation.state = StatusState.CANCELED
        return task


def check_reply_event(agent: Agent, delegation: Delegation, event: pb.StreamResponse) -> None:
    """Check the statuses a reply event carries for ``delegation`` (profile §9: a reply
    Message, a Task's status message, a status update) and note the delegate's task id.
    Shared by ``HandoffClient`` and ``handoff-trace tap --egress``, which reads the same
    events in the answers that pass it."""
    for status_message, task_id in _status_messages(event):
        if task_id:
            delegation.task_id = task_id
        if status_message is None:
            continue
        value = carried(status_message.metadata)
        if value is not None:
            agent.check_reply(delegation, value)


def check_refusal(agent: Agent, delegation: Delegation, data: Any) -> None:
    """A delegate refused ``delegation`` (the ``data`` of its ``InvalidParamsError``): note
    the reason and check the signed ``rejected`` when one came."""
    data = data if isinstance(data, dict) else {}
    delegation.refusal = str(data.get("reason") or "refused")
    status = data.get("status")
    if isinstance(status, str):
        agent.check_reply(delegation, {"status": status})


def _status_messages(event: pb.StreamResponse) -> list[tuple[pb.Message | None, str]]:
    """The messages of a reply that may carry a status (profile §9), with their task id."""
    if event.HasField("message"):
        return [(event.message, event.message.task_id)]
    if event.HasField("task"):
        task = event.task
        return [(task.status.message if task.status.HasField("message") else None, task.id)]
    if event.HasField("status_update"):
        update = event.status_update
        message = update.status.message if update.status.HasField("message") else None
        return [(message, update.task_id)]
    return []
