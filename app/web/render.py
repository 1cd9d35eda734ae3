"""How the dashboard's pages are rendered: one Jinja2 environment, the filters that show
attacker-controlled text safely, the security headers, and "one view, two renderings".

Every agent identifier, ``detail``, dialog and task id is chosen by whoever signed or
captured it. Autoescaping is on for every template; the ``v`` filter also makes control and
bidi characters visible (``U+202E`` is shown as a badge, never applied) and isolates the
text in ``<bdi>`` so it cannot reorder what surrounds it. Templates put untrusted regions
inside ``hx-disable``, so even markup that slipped through would not be processed by htmx.

A page template holds named blocks; an htmx request whose ``HX-Target`` names a block gets
just that block, any other request the whole page (``render``).
"""

from __future__ import annotations

import functools
import json
import re
import time
import unicodedata
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from fastapi import Request
from fastapi.responses import HTMLResponse
from handoff_context import digest_text
from jinja2 import Environment, FileSystemLoader, StrictUndefined, pass_context
from jinja2.runtime import Context
from markupsafe import Markup, escape

from app import resources as packaged

TEMPLATES = packaged.templates()
STATIC = packaged.static()

# No inline script or style anywhere: htmx is configured by a meta tag (no eval, no
# script tags from responses, no injected indicator styles) and Plotly writes its rules
# into a same-origin stylesheet (see templates/base.html), so 'self' is all we need.
CSP = "; ".join(
    (
        "default-src 'none'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self' data:",
        "font-src 'self'",
        "connect-src 'self'",
        "form-action 'self'",
        "frame-ancestors 'none'",
        "base-uri 'none'",
    )
)
SECURITY_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "same-origin",
    "Cross-Origin-Opener-Policy": "same-origin",
    "Permissions-Policy": "camera=(), microphone=(), geolocation=()",
    # Pages show data that only logged-in people may see: never keep them in a cache.
    "Cache-Control": "no-store",
}

# Characters that change how text around them is read: bidi embeddings, overrides and
# isolates (Unicode TR9), zero-width and other format characters, and every control.
_BIDI = set("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


def _hidden(char: str) -> bool:
    return char in _BIDI or unicodedata.category(char) in ("Cc", "Cf", "Zl", "Zp", "Co", "Cs")


def visible_text(value: object) -> str:
    """Plain text with every hidden character spelt out as ``<U+202E>``."""
    text = "" if value is None else str(value)
    return "".join(f"<U+{ord(c):04X}>" if _hidden(c) else c for c in text)


def visible(value: object, limit: int | None = None, *, lines: bool = False) -> Markup:
    """Escaped text, hidden characters as badges, isolated in ``<bdi>``; ``limit`` cuts it
    (the whole text is then in the title); ``lines`` keeps line feeds (for ``<pre>``)."""
    if value is None:
        return Markup('<span class="none">–</span>')
    text = str(value)
    cut = limit is not None and len(text) > limit
    shown = text[: limit - 1] if cut and limit is not None else text
    parts = []
    for char in shown:
        if _hidden(char) and not (lines and char == "\n"):
            name = unicodedata.name(char, "control")
            parts.append(
                Markup('<span class="cc" title="{}">U+{:04X}</span>').format(name, ord(char))
            )
        else:
            parts.append(escape(char))
    body = Markup("").join(parts)
    if cut:
        return Markup('<bdi class="u" title="{}">{}…</bdi>').format(visible_text(text), body)
    return Markup('<bdi class="u">{}</bdi>').format(body)


def visible_lines(value: object) -> Markup:
    return visible(value, lines=True)


def utc(seconds: int | None) -> str:
    if seconds is None:
        return "–"
    return time.strftime("%Y-%m-%d %H:%M:%SZ", time.gmtime(seconds))


def utc_exact(seconds: float | None, floor: int | None = None) -> str:
    """A receive time as observed, with milliseconds; ``floor`` (whole seconds) when the
    fraction was never kept."""
    if seconds is None:
        return utc(floor)
    whole = int(seconds // 1)
    millis = min(999, round((seconds - whole) * 1000))
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(whole)) + f".{millis:03d}Z"


def span(seconds: int) -> str:
    """A duration in its largest sensible unit: ``42 s``, ``5 min``, ``3 h``, ``12 d``."""
    seconds = abs(int(seconds))
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size * (2 if unit != "min" else 1):
            return f"{seconds // size} {unit}"
    return f"{seconds} s"


@pass_context
def ago(context: Context, seconds: int | None) -> Markup:
    """``<time>`` saying how long before the page's ``now`` this was."""
    if seconds is None:
        return Markup('<span class="none">–</span>')
    now = int(context.get("now") or time.time())
    delta = now - int(seconds)
    words = f"in {span(delta)}" if delta < 0 else f"{span(delta)} ago"
    return Markup('<time datetime="{}" title="{}">{}</time>').format(
        time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds)), utc(seconds), words
    )


def digest(value: bytes | str | None) -> str:
    if value is None:
        return ""
    return value if isinstance(value, str) else digest_text(value)


def short(value: bytes | str | None, n: int = 10) -> str:
    text = digest(value)
    return text[:n] + "…" if len(text) > n else text


_PLAIN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


def agent_name(value: str | None) -> str:
    """The last path segment of an identifier, for tight places (the full one goes in a
    title)."""
    if not value:
        return ""
    tail = value.rstrip("/").rsplit("/", 1)[-1]
    # Only a plain name may stand for the whole identifier; anything odd is shown whole.
    return tail if _PLAIN_NAME.fullmatch(tail) else value


@functools.cache
def plotly_path() -> Path:
    """Plotly's bundle inside the installed plotly package (served as /vendor/plotly.min.js).

    Raises RuntimeError when that installation has no such file."""
    bundle = resources.files("plotly").joinpath("package_data", "plotly.min.js")
    if not isinstance(bundle, Path) or not bundle.is_file():
        raise RuntimeError("the installed plotly package has no package_data/plotly.min.js")
    return bundle


@functools.cache
def plotly_style_ids() -> tuple[str, ...]:
    """Ids of the ``<style>`` elements Plotly's bundle would inject at load (MapLibre's CSS)
    unless an element with that id exists. base.html puts an empty element with each id in
    the page, so nothing is injected and the CSP has nothing to block."""
    text = plotly_path().read_text("utf-8", errors="replace")
    found = re.findall(
        r'if\(!document\.getElementById\("([0-9A-Za-z_-]{8,80})"\)\)\{var \w+='
        r'document\.createElement\("style"\)',
        text,
    )
    return tuple(dict.fromkeys(found))


def pretty(value: object) -> str:
    """JSON for reading: indented, characters kept (``v`` then shows hidden ones)."""
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True)


def _environment() -> Environment:
    env = Environment(
        loader=FileSystemLoader(TEMPLATES),
        autoescape=True,
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(
        v=visible,
        vpre=visible_lines,
        vt=visible_text,
        utc=utc,
        utc_exact=utc_exact,
        ago=ago,
        span=span,
        digest=digest,
        short=short,
    )
    env.filters.update(agent=agent_name, pretty=pretty)
    env.globals["plotly_style_ids"] = plotly_style_ids
    env.globals["trace_of"] = trace_of
    return env


@dataclass(frozen=True)
class TraceRef:
    """A hop's OTLP ids (docs/otlp.md) and its page in the tracing tool, if configured."""

    trace_id: str
    span_id: str
    url: str | None


def trace_of(request: Request, dialog: str, offer: bytes) -> TraceRef:
    """The trace id and span id the OTLP export gives the hop, and
    ``HANDOFF_TRACE_TRACE_URL`` filled in with them."""
    from app.otlp.ids import span_hex, trace_hex

    trace, span_ = trace_hex(dialog), span_hex(offer)
    service = getattr(request.app.state, "service", None)
    template = None if service is None else service.settings.trace_url
    url = None
    if template:
        url = template.replace("{trace_id}", trace).replace("{span_id}", span_)
    return TraceRef(trace, span_, url)


ENV = _environment()


def secure(response: Any) -> Any:
    for name, value in SECURITY_HEADERS.items():
        response.headers[name] = value
    return response


def _urgent(request: Request, values: dict[str, Any]) -> int | None:
    """Open critical and high flags, for the header's link to them (None: no one is logged
    in, or the store cannot say; the link is there either way)."""
    service = getattr(request.app.state, "service", None)
    if values.get("user") is None or service is None:
        return None
    from sqlalchemy.exc import SQLAlchemyError

    from app.store.dashboard import urgent_count

    try:
        with service.reading() as session:
            return urgent_count(session, now=service.clock())
    except SQLAlchemyError:
        return None


def render(
    request: Request, name: str, context: dict[str, Any], *, status: int = 200
) -> HTMLResponse:
    """The whole page, or for an htmx request the block its ``HX-Target`` names."""
    template = ENV.get_template(name)
    values = {
        "request": request,
        "user": getattr(request.state, "user", None),
        "now": int(time.time()),
        "nav": "",
        **context,
    }
    target = request.headers.get("hx-target", "")
    partial = (
        request.headers.get("hx-request") == "true"
        and request.headers.get("hx-history-restore-request") != "true"
        and target in template.blocks
    )
    if partial:
        html = "".join(template.blocks[target](template.new_context(values)))
    else:
        html = template.render({**values, "urgent": _urgent(request, values)})
    response = HTMLResponse(html, status_code=status)
    if partial:
        # The same URL answers a page or a fragment; caches must keep them apart.
        response.headers["Vary"] = "HX-Request, HX-Target"
    return secure(response)
