"""What the API's routes take: query and path parameters, cursors, and capture bodies.

Checked here, before any route runs: unknown query parameters (422), digests in canonical
base64url (profile §1.3), cursors this API gave out (400), capture content types (415) and the
body size (413, counted as the octets arrive).
"""

from __future__ import annotations

import base64
import binascii
import json
from collections import Counter
from typing import Annotated, Any

from fastapi import FastAPI, Path, Query, Request
from fastapi.exceptions import RequestValidationError
from handoff_context import MAX_SAFE_INT, RefPolicy, parse_digest_text
from handoff_context.errors import MalformedError
from pydantic import BaseModel, ConfigDict, Field

from app.ingest.build import verify_options
from app.ingest.verifying import VerifyOptions
from app.settings import Settings
from app.web.errors import ApiError, PayloadTooLarge


def query_names(app: FastAPI) -> dict[tuple[str, str], frozenset[str]]:
    """The query parameters each route takes, from the app's own OpenAPI document, so the
    rule and the document cannot differ. Building the document takes about a second of one
    core: the app's lifespan builds it before the first request (``app.state.query_names``),
    so no request of a fresh worker waits for it."""
    return {
        (method, path): frozenset(
            p["name"] for p in op.get("parameters", ()) if p.get("in") == "query"
        )
        for path, ops in app.openapi()["paths"].items()
        for method, op in ops.items()
    }


async def reject_unknown_query(request: Request) -> None:
    """Refuse query parameters the route does not take (422), rather than ignore them: a
    misspelt filter (``?stat=offered``) must not quietly answer every hop. A parameter given
    twice is refused too: every query parameter of the API takes one value, and silently
    keeping the last of ``?receiver=a&receiver=b`` would verify for a receiver nobody
    chose. Async, though it awaits nothing: FastAPI runs a plain ``def`` dependency in a
    worker thread, and under ingest load each such hop waits for the GIL (see
    ``app.web.service.current_service``)."""
    names: dict[tuple[str, str], frozenset[str]] | None = getattr(
        request.app.state, "query_names", None
    )
    if names is None:  # an app served without its lifespan
        names = request.app.state.query_names = query_names(request.app)
    route = request.scope.get("route")
    method = "get" if request.method == "HEAD" else request.method.lower()
    known = names.get((method, getattr(route, "path_format", "")), frozenset())
    unknown = sorted(set(request.query_params) - known)
    if unknown:
        raise RequestValidationError(
            [
                {"type": "extra_forbidden", "loc": ("query", name), "msg": "unknown parameter"}
                for name in unknown
            ]
        )
    given = Counter(name for name, _ in request.query_params.multi_items())
    repeated = sorted(name for name, n in given.items() if n > 1)
    if repeated:
        raise RequestValidationError(
            [
                {"type": "too_long", "loc": ("query", name), "msg": "given more than once"}
                for name in repeated
            ]
        )


# Profile §12's four capture types, and the aliases the capture reader knows as well.
CAPTURE_TYPES = (
    "application/json",
    "application/x-ndjson",
    "application/cbor",
    "application/har+json",
)
CAPTURE_ALIASES = ("application/ndjson", "application/jsonl", "application/cbor-seq")
MAX_PAGE = 500
# A SHA-256 digest in canonical base64url (profile §1.3): 43 characters, the last of which
# leaves its two unused bits zero.
DIGEST_PATTERN = r"^[A-Za-z0-9_-]{42}[AEIMQUYcgkosw048]$"

CAPTURE_BODY = {
    "requestBody": {
        "required": True,
        "description": "A capture file (profile §10); its content type says which format.",
        "content": {
            # Any octets: an item that is not JSON gets its own malformed verdict (profile §10).
            "application/json": {"schema": {}},
            **{
                media: {"schema": {"type": "string", "format": "binary"}}
                for media in CAPTURE_TYPES[1:]
            },
        },
    }
}


# --- parameters -------------------------------------------------------------------------


class VerifyParams(BaseModel):
    """Profile §12: the verify options, named as on the command line. Capture records override
    ``at``, ``receiver`` and ``dialog`` per item (profile §10); the rest default to the
    service's settings."""

    model_config = ConfigDict(extra="forbid")

    receiver: str | None = Field(
        None, min_length=1, max_length=2048, description="the receiver's identifier"
    )
    at: int | None = Field(
        None, ge=0, le=MAX_SAFE_INT, description="receive time for items without one (now)"
    )
    dialog: str | None = Field(None, min_length=1, max_length=1024)
    skew: int | None = Field(None, ge=0, le=3600)
    max_lifetime: int | None = Field(None, ge=1, le=7 * 24 * 3600)
    max_chain: int | None = Field(None, ge=1, le=256)
    ref_policy: RefPolicy | None = None

    def options(self, settings: Settings, *, now: int) -> VerifyOptions:
        return verify_options(
            settings,
            at=now if self.at is None else self.at,
            receiver=self.receiver,
            dialog=self.dialog,
            skew=self.skew,
            max_lifetime=self.max_lifetime,
            max_chain=self.max_chain,
            ref_policy=self.ref_policy,
        )


VerifyQuery = Annotated[VerifyParams, Query()]
DigestPath = Annotated[str, Path(pattern=DIGEST_PATTERN, description="43-char base64url")]
Limit = Annotated[int, Query(ge=1, le=MAX_PAGE, description="items per page")]
Cursor = Annotated[
    str | None,
    Query(
        max_length=4096,
        description="Opaque (base64url text): the `next` of the previous page of the same "
        "listing, passed back as it came. Any other value is refused with 400 "
        "`bad-cursor`.",
    ),
]
Text = Annotated[str | None, Query(min_length=1, max_length=2048)]


def storable(value: str | None) -> str | None:
    """Text a person typed, checked before the store sees it: PostgreSQL's text type refuses
    NUL, and UTF-8 cannot carry a lone surrogate (a JSON ``\\ud800`` escape makes one), so
    either would fail deep in the database driver. Raises ValueError (answered 422)."""
    if value is not None and any(c == "\x00" or "\ud800" <= c <= "\udfff" for c in value):
        raise ValueError("text must not contain NUL or a lone surrogate")
    return value


def parse_digest(text: str) -> bytes:
    try:
        return parse_digest_text(text, what="digest")
    except MalformedError as exc:
        raise ApiError(422, exc.detail) from exc


def encode_cursor(position: list[Any]) -> str:
    data = json.dumps(position, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def decode_cursor(cursor: str | None, shape: tuple[type, ...]) -> list[Any] | None:
    """The position a cursor of ours names, checked against ``shape``. Raises ApiError."""
    if cursor is None:
        return None
    try:
        position = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
    except (binascii.Error, ValueError, RecursionError):  # deep nesting: RecursionError
        position = None
    if (
        not isinstance(position, list)
        or len(position) != len(shape)
        or not all(type(p) is t for p, t in zip(position, shape, strict=True))
        or not all(_storable_part(p) for p in position)
    ):
        raise ApiError(400, "the cursor is not one this API gave out", code="bad-cursor")
    return position


def _storable_part(value: Any) -> bool:
    """A cursor's part the database can take: an integer that fits a signed 64-bit column,
    text without NUL or a lone surrogate (a crafted cursor carries any JSON value, and
    either would fail deep in the driver, not as the 400 a bad cursor is)."""
    if isinstance(value, int):
        return -(2**63) <= value < 2**63
    if isinstance(value, str):
        return not any(c == "\x00" or "\ud800" <= c <= "\udfff" for c in value)
    return True


def paginate(items: list[Any], limit: int, position: Any) -> tuple[list[Any], str | None]:
    """The page and the cursor of the next one (one extra item was fetched to know)."""
    if len(items) <= limit:
        return items, None
    return items[:limit], encode_cursor(position(items[limit - 1]))


async def read_capture(request: Request, limit: int) -> tuple[bytes, str]:
    """The body and its media type. Raises ApiError 415 for another content type and
    PayloadTooLarge past ``limit`` octets (counted as they arrive, before any parsing)."""
    header = request.headers.get("content-type", "")
    media = header.split(";", 1)[0].strip().lower()
    if media not in CAPTURE_TYPES and media not in CAPTURE_ALIASES:
        raise ApiError(
            415,
            f"content type {header[:100]!r} is not a capture format; "
            f"send one of {', '.join(CAPTURE_TYPES)}",
        )
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise PayloadTooLarge(limit)
        chunks.append(chunk)
    return b"".join(chunks), media
