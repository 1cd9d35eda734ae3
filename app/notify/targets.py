"""Webhook targets, read once at start-up from ``HANDOFF_TRACE_WEBHOOKS_FILE``: a JSON
document ``{"targets": [{"name", "url", "shape", "min_severity", "secret", "link_base",
"retry_seconds", "max_attempts"}]}``.

Refused with one line saying what to fix (``TargetError``): a URL that is not http(s), an
unknown shape or severity, a duplicate name, a secret shorter than 16 characters, and,
unless ``HANDOFF_TRACE_WEBHOOK_ALLOW_PRIVATE`` is set, a host that is a loopback,
link-local, private or unspecified address however it is written (``127.1``,
``2852039166``, ``0xa9fea9fe``, ``[::ffff:127.0.0.1]``) or ``localhost``. A host name is
resolved again at every call and each of its addresses checked the same way
(``app.notify.worker``). A target without a secret is allowed (a Slack incoming webhook
cannot check one) but its calls carry no signature header.

A target's URL may hold a credential (user-info, a secret path or query, as Slack's do):
it is never shown (``Target.shown_url``) and never logged.
"""

from __future__ import annotations

import ipaddress
import json
import socket
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

    @property
    def shown_url(self) -> str:
        """The URL as pages and logs show it: scheme, host and port; the path, query and
        user-info (where a credential may be) replaced by an ellipsis."""
        parts = urlsplit(self.url)
        host = parts.hostname or ""
        host = f"[{host}]" if ":" in host else host
        port = f":{parts.port}" if parts.port else ""
        hidden = parts.path not in ("", "/") or parts.query or parts.username
        return f"{parts.scheme}://{host}{port}" + ("/…" if hidden else "/")

    def wants(self, severity: str) -> bool:
        """At or above the target's severity (an unknown severity never qualifies)."""
        if severity not in SEVERITIES:
            return False
        return SEVERITIES.index(severity) <= SEVERITIES.index(self.min_severity)


IpAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


def literal_address(host: str) -> IpAddress | None:
    """The address a host that is written as one names, in any form the system's resolver
    reads (``inet_aton``: decimal, octal, hex, short forms); None for a name."""
    try:
        return ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        pass
    try:
        return ipaddress.IPv4Address(socket.inet_aton(host))
    except OSError:
        return None


def is_public(address: IpAddress) -> bool:
    """An address on the public internet: not loopback, link-local, private, unspecified,
    shared, reserved or multicast (an IPv4-mapped IPv6 address judged as its IPv4)."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return address.is_global and not address.is_multicast


def _check_host(host: str, where: str) -> None:
    name = host.rstrip(".").lower()
    literal = literal_address(name)
    if name == "localhost" or name.endswith(".localhost"):
        literal = ipaddress.IPv4Address("127.0.0.1")
    if literal is not None and not is_public(literal):
        raise TargetError(
            f"{where}: the url's host is a loopback, link-local, private or unspecified "
            "address; set HANDOFF_TRACE_WEBHOOK_ALLOW_PRIVATE=true to allow it"
        )


def _target(entry: Any, where: str, allow_private: bool) -> Target:
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
    try:
        host = urlsplit(url).hostname
        urlsplit(url).port  # noqa: B018  (raises ValueError for a bad port)
    except ValueError as exc:
        raise TargetError(f"{where} ({name}): url is not a valid URL ({exc})") from exc
    if not host:
        raise TargetError(f"{where} ({name}): url has no host")
    if not allow_private:
        _check_host(host, f"{where} ({name})")
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


def parse_targets(doc: Any, *, allow_private: bool = False) -> tuple[Target, ...]:
    if not isinstance(doc, dict) or not isinstance(doc.get("targets"), list):
        raise TargetError('the webhooks file must be {"targets": [...]}')
    targets = tuple(
        _target(e, f"targets[{i}]", allow_private) for i, e in enumerate(doc["targets"])
    )
    names = [t.name for t in targets]
    if len(set(names)) != len(names):
        raise TargetError("two targets have the same name")
    return targets


def load_targets(path: Path | None, *, allow_private: bool = False) -> tuple[Target, ...]:
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
        return parse_targets(json.loads(data), allow_private=allow_private)
    except ValueError as exc:
        if isinstance(exc, TargetError):
            raise TargetError(f"{path}: {exc}") from exc
        raise TargetError(f"{path} is not JSON: {exc}") from exc
