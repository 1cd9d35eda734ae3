"""The dashboard's static assets (``/static/NAME``) and Plotly's bundle
(``/vendor/plotly.min.js``), compressed and cached.

Each file is read once and gzip-compressed once (Plotly's 4.8 MB bundle goes over the wire as
about 1.4 MB) and kept in memory; a client that accepts gzip gets the compressed octets.
Pages name each asset with a version, the first 12 hex digits of its SHA-256
(``asset_url``: ``/static/app.css?v=…``), so a request carrying the current version may be
kept for a year (``immutable``) and a new release changes the URL; any other request is
answered ``no-cache`` with an ETag, and a matching ``If-None-Match`` with 304. Only files
under the packaged ``static/`` directory are served, never a path outside it.
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import mimetypes
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

from fastapi import APIRouter, Query, Request
from fastapi.responses import Response
from starlette.concurrency import run_in_threadpool

from app.web.render import ENV, STATIC, plotly_path
from app.web.sessions import PageError

router = APIRouter(include_in_schema=False)
YEAR = 365 * 86400
# Text compresses; images already compressed (none today) would not gain.
_COMPRESSIBLE = ("text/", "application/javascript", "image/svg+xml", "application/json")


@dataclass(frozen=True)
class Asset:
    octets: bytes
    gzipped: bytes | None
    media_type: str
    version: str  # first 12 hex digits of the SHA-256 of the octets

    @property
    def etag(self) -> str:
        return f'"{self.version}"'


def _load(path: Path, media_type: str | None = None) -> Asset:
    octets = path.read_bytes()
    media = media_type or mimetypes.guess_type(path.name)[0] or "application/octet-stream"
    if media.startswith("text/") or media.endswith("javascript"):
        media = f"{media}; charset=utf-8"
    packed = None
    if media.startswith(_COMPRESSIBLE) and len(octets) > 512:
        packed = gzip.compress(octets, compresslevel=9, mtime=0)
    return Asset(octets, packed, media, hashlib.sha256(octets).hexdigest()[:12])


@functools.cache
def _files() -> dict[str, Path]:
    """Every file under static/ by its path there: a request's name is looked up here, never
    handed to the file system."""
    root = Path(str(STATIC))
    return {p.relative_to(root).as_posix(): p for p in root.rglob("*") if p.is_file()}


@functools.cache
def _loaded(name: str) -> Asset:
    return _load(_files()[name])


def static_asset(name: str) -> Asset | None:
    """The asset ``name`` under static/, or None when static/ has no such file."""
    return _loaded(name) if name in _files() else None


@functools.cache
def plotly_asset() -> Asset:
    return _load(plotly_path(), "text/javascript")


def asset_url(name: str) -> str:
    """``/static/NAME?v=VERSION`` for a template (the version makes it cacheable)."""
    found = static_asset(name)
    return f"/static/{name}" if found is None else f"/static/{name}?v={found.version}"


def plotly_url() -> str:
    return f"/vendor/plotly.min.js?v={plotly_asset().version}"


ENV.globals["asset_url"] = asset_url
ENV.globals["plotly_url"] = plotly_url


def answer(request: Request, asset: Asset, version: str | None) -> Response:
    """The asset as this request may have it: 304, gzip or plain, with its cache rules."""
    headers = {"ETag": asset.etag, "Vary": "Accept-Encoding", "X-Content-Type-Options": "nosniff"}
    if version == asset.version:
        headers["Cache-Control"] = f"public, max-age={YEAR}, immutable"
    else:
        headers["Cache-Control"] = "no-cache"
    if request.headers.get("if-none-match") == asset.etag:
        return Response(status_code=304, headers=headers)
    accepted = request.headers.get("accept-encoding", "")
    if asset.gzipped is not None and "gzip" in accepted.lower():
        headers["Content-Encoding"] = "gzip"
        return Response(asset.gzipped, media_type=asset.media_type, headers=headers)
    return Response(asset.octets, media_type=asset.media_type, headers=headers)


Version = Annotated[str | None, Query(max_length=64)]


@router.get("/static/{name:path}")
async def static(request: Request, name: str, v: Version = None) -> Response:
    found = await run_in_threadpool(static_asset, name[:256])
    if found is None:
        raise PageError(404, "There is no such file.")
    return answer(request, found, v)


@router.get("/vendor/plotly.min.js")
async def plotly(request: Request, v: Version = None) -> Response:
    """Plotly's bundle from the installed package (no CDN), compressed once."""
    return answer(request, await run_in_threadpool(plotly_asset), v)
