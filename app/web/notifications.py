"""The webhook delivery log (``/notifications``): every call the notifier made or will
make, newest first, with its target, flag, attempts and the last answer; and the targets as
configured (never their secrets)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response

from app.store.notify import deliveries
from app.web.render import render
from app.web.service import ServiceDep
from app.web.sessions import Viewer

router = APIRouter(include_in_schema=False)


@router.get("/notifications")
def notifications(request: Request, user: Viewer, service: ServiceDep) -> Response:
    notifier = getattr(request.app.state, "notifier", None)
    targets = [] if notifier is None else list(notifier.targets.values())
    with service.reading() as session:
        rows = deliveries(session, limit=200)
    context = {
        "nav": "notifications",
        "now": service.clock(),
        "targets": targets,
        "rows": rows,
        "every": service.settings.webhook_seconds,
    }
    return render(request, "notifications.html", context)
