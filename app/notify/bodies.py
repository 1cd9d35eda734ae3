"""The three body shapes a webhook target may ask for, for one flag event.

- ``alertmanager``: the JSON Alertmanager posts to its webhook receivers (version 4), one
  alert per call, so anything that takes Alertmanager's webhooks takes these.
- ``slack``: a Slack incoming-webhook message (``text`` with a ``blocks`` section).
- ``generic``: ``{"event", "flag", "sent_at"}`` with the flag as the API's ``FlagPublic``
  fields and a link to its page.
"""

from __future__ import annotations

import json
import time
from typing import Any

from handoff_context import digest_text

from app.notify.targets import Target
from app.store.models import FlagRow


def _iso(seconds: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))


def _flag(flag: FlagRow, link: str) -> dict[str, Any]:
    return {
        "id": flag.id,
        "kind": flag.kind,
        "variant": flag.variant,
        "severity": flag.severity,
        "status": flag.status,
        "iss": flag.iss,
        "hop": flag.hop,
        "offer": None if flag.offer is None else digest_text(flag.offer),
        "case_id": flag.case_id,
        "opened_at": flag.opened_at,
        "detail": flag.detail,
        "url": link,
    }


def _alertmanager(target: Target, event: str, flag: FlagRow, link: str) -> dict[str, Any]:
    labels = {
        "alertname": "HandoffTraceFlag",
        "kind": flag.kind,
        "severity": flag.severity,
        "issuer": flag.iss,
        "flag_id": str(flag.id),
    }
    alert = {
        "status": "firing",
        "labels": labels,
        "annotations": {
            "summary": f"{flag.severity} {flag.kind} flag #{flag.id} {event}",
            "description": flag.detail,
        },
        "startsAt": _iso(flag.opened_at),
        "endsAt": "0001-01-01T00:00:00Z",
        "generatorURL": link,
        "fingerprint": (flag.key or "")[:16],
    }
    return {
        "version": "4",
        "groupKey": f"handoff-trace/{flag.kind}/{flag.id}",
        "truncatedAlerts": 0,
        "status": "firing",
        "receiver": target.name,
        "groupLabels": {"alertname": "HandoffTraceFlag"},
        "commonLabels": labels,
        "commonAnnotations": alert["annotations"],
        "externalURL": target.link_base,
        "alerts": [alert],
    }


def _slack(event: str, flag: FlagRow, link: str) -> dict[str, Any]:
    # Slack's mrkdwn reads <, > and & as markup: identifiers chosen by a signer are escaped.
    def esc(text: str) -> str:
        return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")

    head = f"{flag.severity.upper()} {flag.kind} flag #{flag.id} {event}"
    lines = [f"*{esc(head)}*", esc(flag.detail), f"issuer: `{esc(flag.iss)}`"]
    if link:
        lines.append(f"<{link}|Open the flag>")
    return {
        "text": head,
        "blocks": [{"type": "section", "text": {"type": "mrkdwn", "text": "\n".join(lines)}}],
    }


def render_body(target: Target, event: str, flag: FlagRow, *, now: int) -> str:
    """The JSON text sent to ``target`` for ``event`` (opened | reopened) of ``flag``."""
    link = f"{target.link_base}/flags/{flag.id}" if target.link_base else ""
    if target.shape == "alertmanager":
        body = _alertmanager(target, event, flag, link)
    elif target.shape == "slack":
        body = _slack(event, flag, link)
    else:
        body = {"event": f"flag.{event}", "flag": _flag(flag, link), "sent_at": now}
    return json.dumps(body, ensure_ascii=False, separators=(",", ":"), sort_keys=True)
