"""The user's side: asks the planner for three jobs (one that completes, one that fails,
one it then cancels) and prints what each came to."""

from __future__ import annotations

import asyncio
import sys

import httpx
from a2a.client import ClientConfig, ClientFactory
from a2a.types import a2a_pb2 as pb
from common import PLANNER, SERVICE, TOKEN, TRUST, USER, card, key
from handoff_context import Agent, Signer, TrustStore
from handoff_context.a2a import HandoffClient
from handoff_context.reporter import Reporter


async def main(run: str) -> int:
    reporter = Reporter(SERVICE, TOKEN, receiver=USER)  # handoff
    agent = Agent(Signer.load(key("user")), TrustStore.load(TRUST), reporter=reporter)  # handoff
    async with httpx.AsyncClient(timeout=120) as http:
        for job in ("complete", "fail", "wait"):
            streaming = job != "wait"
            config = ClientConfig(httpx_client=http, streaming=streaming)
            sdk = ClientFactory(config).create(card("planner"))
            planner = HandoffClient(agent, sdk, to=PLANNER)  # handoff
            message = pb.Message(
                message_id=f"{run}-{job}",
                context_id=f"example-{run}-{job}",
                role=pb.Role.ROLE_USER,
                parts=[pb.Part(text=job)],
            )
            request = pb.SendMessageRequest(message=message)
            request.configuration.return_immediately = job == "wait"
            delegation = await planner.delegate(request)
            if job == "wait":
                await until_working(planner, delegation.task_id or "")
                await planner.cancel()
            state = delegation.state.value if delegation.state else "no status"
            print(f"  {job:8} -> {state:9} dialog {message.context_id}", flush=True)
    return 0


async def until_working(planner: HandoffClient, task_id: str) -> None:
    for _ in range(200):
        task = await planner.get_task(pb.GetTaskRequest(id=task_id))
        if task.status.state == pb.TaskState.TASK_STATE_WORKING:
            return
        await asyncio.sleep(0.05)


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else "run")))
