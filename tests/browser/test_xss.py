"""Hostile text in a real browser: every page that shows what agents and captures chose,
with XSS payloads in every field that can hold one (tests/browser/hostile_data.py): the
signed-handoff pages, and the case pages of envelope handoffs (docs/envelopes.md) with their
Plotly ownership timeline hovered marker by marker.

For each page the browser must show: no script of the payloads ran (``window.__xss``
stays unset, no ``alert``), the CSP never had to block anything (so escaping alone held;
``securitypolicyviolation`` events are recorded), no console error, no request left for
another origin (every request is intercepted and its host recorded), a Content-Security-
Policy header without ``unsafe-inline`` or ``unsafe-eval``, a DOM with no event-handler
attribute, no inline script, and only same-origin paths in URL attributes; the payloads
appear as text, with bidi and control characters shown as visible badges.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, urlsplit

import pytest

from tests.browser import hostile_data as h
from tests.browser.conftest import PASSWORD, VIEWPORT, serve_store

# Runs in every page before its own scripts (Playwright injects it past the CSP): records
# every CSP violation, so a payload the CSP had to stop still fails the test.
WATCH = """
window.__csp = [];
document.addEventListener("securitypolicyviolation", function (e) {
  window.__csp.push(e.violatedDirective + " " + e.blockedURI);
});
"""

# Every attribute that holds a URL the browser (or htmx) would follow or fetch.
URL_ATTRIBUTES = (
    "href",
    "src",
    "action",
    "formaction",
    "xlink:href",
    "data-href",
    "hx-get",
    "hx-post",
    "hx-put",
    "hx-patch",
    "hx-delete",
    "hx-push-url",
)

# The DOM checks, in the page: what a payload that escaped its text would leave behind.
SCAN = """
(urlAttributes) => {
  const found = [];
  for (const el of document.querySelectorAll("*")) {
    for (const attr of el.attributes) {
      const name = attr.name.toLowerCase();
      if (name.startsWith("on") || name.startsWith("hx-on") || name.startsWith("data-hx-on")) {
        found.push(`${el.tagName} has ${name}`);
      }
      if (urlAttributes.includes(name)) {
        const value = attr.value.trim();
        const local = value === "" || value === "true" || value === "false" || value.startsWith("#")
          || value.startsWith("?") || (value.startsWith("/") && !value.startsWith("//"));
        if (!local) found.push(`${el.tagName} ${name}=${value.slice(0, 80)}`);
      }
    }
  }
  for (const s of document.querySelectorAll("script")) {
    const src = s.getAttribute("src") || "";
    if (!/^\\/(static|vendor)\\//.test(src) || s.textContent.trim()) {
      found.push(`script src=${src} text=${s.textContent.slice(0, 80)}`);
    }
  }
  const foreign = "img, iframe, object, embed, style, base, meta[http-equiv]";
  for (const el of document.querySelectorAll(foreign)) {
    found.push(`unexpected <${el.tagName.toLowerCase()}>`);
  }
  return found;
}
"""

# Characters that must never reach the screen raw (they are shown as U+XXXX badges).
HIDDEN = re.compile("[\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\x00-\x08\x0b-\x1f\x7f]")


@dataclass
class Watched:
    """One logged-in browser tab and everything it saw."""

    page: Any
    base: str
    data: h.Hostile
    hosts: set[str] = field(default_factory=set)
    dialogs: list[str] = field(default_factory=list)
    console: list[str] = field(default_factory=list)

    def check(self, path: str, response: Any) -> str:
        """Every check of the module docstring on the page now shown; returns its text."""
        assert response is not None and response.status == 200, (path, response and response.status)
        csp = response.headers.get("content-security-policy", "")
        assert "script-src 'self'" in csp, (path, csp)
        assert "unsafe-inline" not in csp and "unsafe-eval" not in csp, (path, csp)
        page = self.page
        assert page.evaluate("typeof window.__xss") == "undefined", (path, "a payload ran")
        assert page.evaluate("window.__csp") == [], (path, "the CSP had to block something")
        assert page.evaluate(SCAN, list(URL_ATTRIBUTES)) == [], path
        assert self.dialogs == [], (path, self.dialogs)
        errors = [m for m in self.console if m.startswith(("error", "pageerror"))]
        assert errors == [], (path, errors)
        assert self.hosts <= {urlsplit(self.base).netloc}, (path, self.hosts)
        text = str(page.inner_text("body"))
        raw = sorted({f"U+{ord(c):04X}" for c in HIDDEN.findall(text)})
        assert raw == [], (path, f"shown raw: {raw}")
        return text

    def visit(self, path: str) -> str:
        response = self.page.goto(self.base + path)
        self.page.wait_for_load_state("networkidle")
        return self.check(path, response)


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, h.Hostile]]:
    data = h.build(tmp_path_factory.mktemp("hostile"))
    with serve_store(data.db, data.trust, data.now) as base:
        yield base, data


@pytest.fixture(scope="module")
def tab(browser: Any, hostile: tuple[str, h.Hostile]) -> Iterator[Watched]:
    base, data = hostile
    context = browser.new_context(viewport=VIEWPORT)
    context.add_init_script(WATCH)
    page = context.new_page()
    watched = Watched(page, base, data)

    def record(route: Any) -> None:
        host = urlsplit(route.request.url).netloc
        watched.hosts.add(host)
        if host == urlsplit(base).netloc:
            route.continue_()
        else:
            route.abort()

    context.route("**/*", record)
    page.on("console", lambda m: watched.console.append(f"{m.type}: {m.text}"))
    page.on("pageerror", lambda e: watched.console.append(f"pageerror: {e}"))

    def on_dialog(dialog: Any) -> None:
        watched.dialogs.append(dialog.message)
        dialog.dismiss()

    page.on("dialog", on_dialog)
    page.goto(base + "/login")
    page.fill("input[name=username]", "ada")
    page.fill("input[name=password]", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_load_state("networkidle")
    try:
        yield watched
    finally:
        context.close()


def _pages(data: h.Hostile) -> dict[str, str]:
    return {
        "overview": "/",
        "dialogs": "/dialogs",
        "dialog": "/dialogs/" + quote(h.DIALOG, safe=""),
        "hops": "/hops",
        "unresolved": "/hops?state=unresolved",
        "hops of an agent": "/hops?agent=" + quote(h.A, safe=""),
        "agents": "/agents",
        "trust": "/trust",
        "search for markup": "/search?q=" + quote("<script>", safe=""),
        "search for the dialog": "/search?q=" + quote(h.DIALOG, safe=""),
        "triage": "/flags?status=any",
        "triage of an agent": "/flags?status=any&agent=" + quote(h.C, safe=""),
        "flag": f"/flags/{data.equivocation_flag}",
        "hop": f"/hops/{data.offer}",
        "hop with a chain": f"/hops/{data.next_offer}",
        "element": f"/hops/{data.rejected}",
        "untrusted element": f"/hops/{data.untrusted}",
        "dialog mismatch": f"/hops/{data.mismatch}",
    }


def _case_pages(data: h.Hostile) -> dict[str, str]:
    """The pages of envelope handoffs (docs/envelopes.md), with the triage queue's view of
    the case flags."""
    return {
        "cases": "/cases",
        "cases matching markup": "/cases?q=" + quote("<script>", safe=""),
        "case": "/cases/" + quote(h.CASE_ID, safe=""),
        "triage of case flags": "/flags?status=any&kind=two-owners",
        "triage of a case actor": "/flags?status=any&agent=" + quote(h.ACTOR, safe=""),
        "case flag": f"/flags/{data.context_flag}",
    }


def test_every_page_shows_the_payloads_as_text_and_runs_none(tab: Watched) -> None:
    shown = {name: tab.visit(path) for name, path in _pages(tab.data).items()}
    # Shown, not dropped: the markup is there as characters people can read.
    assert h.DIALOG in shown["dialog"] and h.DIALOG in shown["hop"]
    for name in ("hop", "flag"):
        assert h.A in shown[name] and h.B in shown[name], name
    assert h.TASK in shown["hop"] and h.OBO in shown["hop"]
    assert "javascript:window.__xss='reason'" in shown["hop"]
    assert "<script>window.__xss='detail'</script>" in shown["hop"]
    assert "javascript:alert('uri')" in shown["hop"]
    assert h.D in shown["element"] and h.C in shown["element"]
    assert h.STRANGER in shown["untrusted element"]
    mismatch = shown["dialog mismatch"]
    assert "is not the carrier's 'ctx-\"><script>window.__xss=" in mismatch, mismatch
    # Cut to fit a table, the full identifier in the title, still as text.
    assert "spiffe://a.example/<script>window.__xss…" in shown["hops of an agent"]
    # Bidi overrides and controls as badges, never applied.
    for name in ("hop", "flag"):
        assert "U+202E" in shown[name], name
    assert "U+001B" in shown["hop"] and "U+0007" in shown["hop"]


def test_the_case_pages_show_the_envelope_payloads_as_text(tab: Watched) -> None:
    shown = {name: tab.visit(path) for name, path in _case_pages(tab.data).items()}
    # The case page folds its earlier handoffs: unfold them all, then read it again.
    tab.visit(_case_pages(tab.data)["case"])
    tab.page.evaluate("document.querySelectorAll('details').forEach((d) => { d.open = true; })")
    shown["case"] = case = str(tab.page.inner_text("body"))
    assert tab.page.evaluate("typeof window.__xss") == "undefined"
    # Every untrusted member of the envelopes, the answers and the case events, as text.
    for text in (h.GOAL, h.STEP, h.FACT_KEY, h.FACT_VALUE, h.FACT_SOURCE, h.QUESTION):
        assert _seen(text) in case, text
    for text in (h.CONSTRAINT, h.REJECTION, h.EVENT_DETAIL, h.BAD_EPOCH, h.DRIFT_TYPE):
        assert _seen(text) in case, text
    for text in (h.CASE_ID, h.HANDOFF, h.JS_URL, h.BREAKOUT_URL, h.REF_TYPE, h.SUMMARY):
        assert _seen(text) in case, text
    assert _seen(h.FILENAME)[:47] in case  # cut to fit the table
    assert "context id 'ctx-\"><script>window.__xss=\\'context" in shown["case flag"]
    for name in ("cases", "cases matching markup"):
        assert _seen(h.CASE_ID) in shown[name], name
    for name in ("triage of case flags", "triage of a case actor"):
        assert "two-owners" in shown[name] and "case C-<script>" in shown[name], name
    # The case id's override and bell, as badges.
    for name in ("case", "cases"):
        assert "U+202E" in shown[name] and "U+0007" in shown[name], name


def _seen(text: str) -> str:
    """``text`` as a page shows it: hidden characters as their badges, line feeds kept."""
    return HIDDEN.sub(lambda m: f"U+{ord(m.group()):04X}", text)


def test_hovering_and_focusing_the_hostile_text_runs_nothing(tab: Watched) -> None:
    response = tab.page.goto(f"{tab.base}/hops/{tab.data.offer}")
    tab.page.wait_for_load_state("networkidle")
    hostile = tab.page.locator("main bdi.u >> visible=true")
    for i in range(min(hostile.count(), 40)):
        hostile.nth(i).hover()
    tab.page.keyboard.press("Tab")
    tab.check("/hops (hovered)", response)


def test_hovering_the_case_timeline_runs_nothing(tab: Watched) -> None:
    path = "/cases/" + quote(h.CASE_ID, safe="")
    response = tab.page.goto(tab.base + path)
    plot = tab.page.locator(".plot")
    plot.locator(".main-svg").first.wait_for()
    labels = plot.locator(".ytick text").all_text_contents()
    assert any(h.RECEIVER.rsplit("/", 1)[-1] in t for t in labels), labels
    assert any("<U+202E><script>" in t for t in labels), labels  # the actor's row
    markers = plot.locator("g.scatterlayer path.point")
    assert markers.count() == 7  # every event of the case
    from playwright.sync_api import expect

    hovered = []
    layer = plot.locator(".hoverlayer text")
    for i in range(markers.count()):
        # Plotly throttles hover events, so a label read right after a hover may still be
        # the previous point's, or not drawn yet: the label is cleared first (the pointer
        # leaves the plot), then read once the new one is drawn.
        tab.page.mouse.move(0, 0)
        expect(layer).to_have_count(0)
        markers.nth(i).hover(force=True)
        expect(layer.first).to_be_attached()
        hovered.append(" ".join(layer.all_text_contents()))
    assert any("window.__xss='event'" in t for t in hovered), hovered
    assert any("<U+202E>" in t for t in hovered), hovered
    assert plot.locator("a").count() == 0
    # Checked before any reload, so what a hover ran or the CSP blocked is still recorded.
    tab.check(path + " (hovered)", response)


def test_the_timeline_labels_show_markup_as_text(tab: Watched) -> None:
    tab.visit("/dialogs/" + quote(h.DIALOG, safe=""))
    tab.page.wait_for_selector(".plot .main-svg")
    ticks = tab.page.locator(".plot .ytick text").all_text_contents()
    # Plotly's own markup (<b>, <br>, <a>) in an identifier is shown, not applied.
    assert any("<b>bold<br>" in t for t in ticks), ticks
    assert tab.page.locator(".plot a").count() == 0


def test_the_upload_report_shows_refused_input_safely(tab: Watched) -> None:
    tab.visit("/upload")
    tab.page.set_input_files(
        "input[type=file]",
        files=[
            {"name": h.UPLOAD_NAME, "mimeType": "application/x-ndjson", "buffer": tab.data.upload}
        ],
    )
    with tab.page.expect_response(lambda r: r.url.endswith("/upload")) as answer:
        tab.page.click("#upload button[type=submit]")
    tab.page.wait_for_selector("#report table.report tbody tr")
    tab.page.wait_for_load_state("networkidle")
    text = tab.check("/upload (report)", answer.value)
    report = tab.page.inner_text("#report")
    assert "malformed" in report  # the bidi identifier and the record's control character
    assert "U+202E" in text  # the file name's override, as a badge
    assert "<img src=x onerror=alert('file')>" in text
    for i in range(tab.page.locator("#report details").count()):
        tab.page.locator("#report details summary").nth(i).click()
    tab.check("/upload (details open)", answer.value)
