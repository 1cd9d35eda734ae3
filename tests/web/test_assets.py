"""Static assets and Plotly's bundle: gzip-compressed for a client that accepts it, cached
for a year under their versioned URL (the pages link those), revalidated by ETag otherwise,
and nothing outside static/ is served."""

from __future__ import annotations

import re

from app.web.assets import static_asset
from app.web.render import STATIC
from tests.web import test_pages
from tests.web.test_pages import Dash

dataset = test_pages.dataset
dash = test_pages.dash


def test_the_stylesheet_is_compressed_and_cached_under_its_version(dash: Dash) -> None:
    dash.login("rita")
    page = dash.client.get("/flags").text
    found = re.search(r'href="(/static/app\.css\?v=([0-9a-f]{12}))"', page)
    assert found is not None
    url, version = found.groups()
    source = (STATIC / "app.css").read_bytes()
    fresh = dash.client.get(url, headers={"Accept-Encoding": "gzip"})
    assert fresh.status_code == 200 and fresh.headers["content-encoding"] == "gzip"
    assert fresh.content == source  # httpx undoes the gzip
    assert fresh.num_bytes_downloaded < len(source) / 3
    assert fresh.headers["cache-control"] == "public, max-age=31536000, immutable"
    assert fresh.headers["content-type"] == "text/css; charset=utf-8"
    assert version == static_asset("app.css").version  # type: ignore[union-attr]
    plain = dash.client.get("/static/app.css", headers={"Accept-Encoding": "identity"})
    assert "content-encoding" not in plain.headers and plain.content == source
    assert plain.headers["cache-control"] == "no-cache"
    again = dash.client.get("/static/app.css", headers={"If-None-Match": plain.headers["etag"]})
    assert again.status_code == 304 and again.content == b""


def test_plotly_goes_compressed(dash: Dash) -> None:
    dash.login("rita")
    page = dash.client.get("/").text
    url = re.search(r'src="(/vendor/plotly\.min\.js\?v=[0-9a-f]{12})"', page)
    assert url is not None
    bundle = dash.client.get(url.group(1), headers={"Accept-Encoding": "gzip, br"})
    assert bundle.status_code == 200 and bundle.headers["content-encoding"] == "gzip"
    assert len(bundle.content) > 3_000_000 and bundle.num_bytes_downloaded < 1_800_000
    assert "immutable" in bundle.headers["cache-control"]


def test_nothing_outside_static_is_served(dash: Dash) -> None:
    for path in ("/static/../pyproject.toml", "/static/%2e%2e/pyproject.toml", "/static/nope.css"):
        response = dash.client.get(path)
        assert response.status_code == 404, path
