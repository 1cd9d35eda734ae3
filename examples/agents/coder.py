"""The coder: an a2a-sdk agent that does what its task says (complete, fail or wait)."""

from __future__ import annotations

import asyncio

from a2a.helpers.proto_helpers import new_task_from_user_message
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from common import CODER, SERVICE, TOKEN, TRUST, a2a_app, card, key, serve
from handoff_context import Agent, Signer, TrustStore
from handoff_context.a2a import HandoffRequestHandler
from handoff_context.reporter import Reporter


class Coder(AgentExecutor):
    def __init__(self) -> None:
        self.cancels: dict[str, asyncio.Event] = {}

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        assert context.message is not None and context.task_id and context.context_id
        updater = TaskUpdater(event_queue, context.task_id, context.context_id)
        await event_queue.enqueue_event(
            context.current_task or new_task_from_user_message(context.message)
        )
        await updater.start_work()
        what = context.get_user_input()
        if what == "wait":
            await self.cancels.setdefault(context.task_id, asyncio.Event()).wait()
        elif what == "fail":
            await updater.failed()
        else:
            await updater.complete()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        assert context.task_id and context.context_id
        await TaskUpdater(event_queue, context.task_id, context.context_id).cancel()
        self.cancels.setdefault(context.task_id, asyncio.Event()).set()


reporter = Reporter(SERVICE, TOKEN, receiver=CODER)  # handoff
agent = Agent(Signer.load(key("coder")), TrustStore.load(TRUST), reporter=reporter)  # handoff
handler = HandoffRequestHandler(agent, Coder(), InMemoryTaskStore(), card("coder"))  # handoff

if __name__ == "__main__":
    serve(a2a_app(handler, card("coder")), "coder")
