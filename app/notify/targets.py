"""Webhook targets, read once at start-up from ``HANDOFF_TRACE_WEBHOOKS_FILE``: a JSON
document ``{"targets": [{"name", "url", "shape", "min_severity", "secret", "link_base",
"retry_seconds", "max_attempts"}]}``.

Refused with one line saying what to fix (``TargetError``): a URL that is not http(s), an
unknown shape or severity, a duplicate name, a secret shorter than 16 characters. A target
without a secret is allowed (a Slack incoming webhook cannot check one) but its calls carry
no signature header.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from app.errors import HandoffTraceError

SHAPES = ("alertmanager", "slack", "generic")
SEVERITIES = ("critical", "high", "medium", "low")
MAX_FILE = 1024 * 1024


class TargetError(HandoffTraceError, ValueError):
    """The webhooks file cannot be used; ``str(exc)`` says what to fix."""

    reason = "webhook-target"


@dataclass(frozen=True)
class Target:
    name: str
    url: str
    shape: str = "generic"
    min_severity: str = "high"
    secret: str | None = None
    link_base: str = ""  # the dashboard's public address, for links in the alert
    retry_seconds: int = 10  # the first retry's delay; each further one doubles it
    max_attempts: int = 6

    def wants(self, severity: str) -> bool:
        """At or above the target's severity (an unknown severity never qualifies)."""
        if severity not in SEVERITIES:
            return False
        return SEVERITIES.index(severity) <= SEVERITIES.index(self.min_severity)


def _target(entry: Any, where: str) -> Target:
    if not isinstance(entry, dict):
        raise TargetError(f"{where} must be an object")
    unknown = set(entry) - set(Target.__dataclass_fields__)
    if unknown:
        raise TargetError(f"{where}: unknown member {sorted(unknown)[0]!r}")
    name, url = entry.get("name"), entry.get("url")
    if not isinstance(name, str) or not name.strip() or len(name) > 200:
        raise TargetError(f"{where}: name must be text (at most 200 characters)")
    if not isinstance(url, str) or urlsplit(url).scheme not in ("http", "https"):
        raise TargetError(f"{where} ({name}): url must be an http:// or https:// URL")
    if not urlsplit(url).netloc:
        raise TargetError(f"{where} ({name}): url has no host")
    shape = entry.get("shape", "generic")
    if shape not in SHAPES:
        raise TargetError(f"{where} ({name}): shape must be one of {', '.join(SHAPES)}")
    severity = entry.get("min_severity", "high")
    if severity not in SEVERITIES:
        raise TargetError(f"{where} ({name}): min_severity must be one of {', '.join(SEVERITIES)}")
    secret = entry.get("secret")
    if secret is not None and (not isinstance(secret, str) or len(secret) < 16):
        raise TargetError(f"{where} ({name}): secret must be at least 16 characters")
    retry, attempts = entry.get("retry_seconds", 10), entry.get("max_attempts", 6)
    if not isinstance(retry, int) or not 1 <= retry <= 3600:
        raise TargetError(f"{where} ({name}): retry_seconds must be 1 to 3600")
    if not isinstance(attempts, int) or not 1 <= attempts <= 20:
        raise TargetError(f"{where} ({name}): max_attempts must be 1 to 20")
    link = entry.get("link_base", "")
    if not isinstance(link, str):
        raise TargetError(f"{where} ({name}): link_base must be text")
    return Target(name.strip(), url, shape, severity, secret, link.rstrip("/"), retry, attempts)


def parse_targets(doc: Any) -> tuple[Target, ...]:
    if not isinstance(doc, dict) or not isinstance(doc.get("targets"), list):
        raise TargetError('the webhooks file must be {"targets": [...]}')
    targets = tuple(_target(e, f"targets[{i}]") for i, e in enumerate(doc["targets"]))
    names = [t.name for t in targets]
    if len(set(names)) != len(names):
        raise TargetError("two targets have the same name")
    return targets


def load_targets(path: Path | None) -> tuple[Target, ...]:
    """The targets of ``path`` (none without a file). Raises TargetError."""
    if path is None:
        return ()
    try:
        data = path.read_bytes()[: MAX_FILE + 1]
    except OSError as exc:
        raise TargetError(f"cannot read the webhooks file {path}: {exc.strerror}") from exc
    if len(data) > MAX_FILE:
        raise TargetError(f"the webhooks file {path} is larger than {MAX_FILE} octets")
    try:
        return parse_targets(json.loads(data))
    except ValueError as exc:
        if isinstance(exc, TargetError):
            raise TargetError(f"{path}: {exc}") from exc
        raise TargetError(f"{path} is not JSON: {exc}") from exc
