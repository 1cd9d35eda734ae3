"""Every dashboard page in Debian's Chromium at 1440x900 light, 1440x900 dark and 390x844
(a phone), as full-page PNGs in one folder, so a reviewer can look at all of them at once.

    make screenshots            # or: .venv/bin/python -m tests.browser.screenshots [OUT [PAGE...]]

The store is the browser tests' data set (a small demo run, hostile traffic, the worked case
example) served on a loopback port with its clock pinned; nothing is written to it except
one upload report. The folder (default ``var/screenshots``) is not committed. Each shot's
page height is printed, so a layout change that makes a page taller shows in the listing.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from urllib.parse import quote

from sqlalchemy import func, select

from app.store import db
from app.store.models import (
    ElementRow,
    EnvelopeItemRow,
    FlagRow,
    HopRow,
    RejectedOctetsRow,
    VerdictRow,
)
from tests.browser.conftest import CHROMIUM, CHROMIUM_ARGS, PASSWORD, REPO, serve_store
from tests.web import case_data
from tests.web.dashboard_data import build

SIZES = {
    "desktop-light": ({"width": 1440, "height": 900}, "light"),
    "desktop-dark": ({"width": 1440, "height": 900}, "dark"),
    "phone": ({"width": 390, "height": 844}, "light"),
}


def pages(store: Path) -> dict[str, str]:
    """The page name and path of every page the dashboard has, one of each kind."""
    from handoff_context import digest_text

    engine = db.make_engine(f"sqlite:///{store}")
    try:
        with db.transaction(engine) as session:
            hop = session.execute(select(HopRow).limit(1)).scalars().first()
            flags = {
                kind: fid
                for kind, fid in session.execute(
                    select(FlagRow.kind, FlagRow.id).order_by(FlagRow.id)
                )
            }
            loose = session.execute(
                select(ElementRow.digest)
                .where(ElementRow.type == "offer")
                .where(~ElementRow.digest.in_(select(HopRow.offer)))
                .limit(1)
            ).scalar()
            refused = session.execute(select(RejectedOctetsRow.digest).limit(1)).scalar()
            # A refused offer's hop id: search finds the refusal though no hop exists.
            refused_hop = session.execute(
                select(ElementRow.hop)
                .join(VerdictRow, VerdictRow.digest == ElementRow.digest)
                .where(VerdictRow.outcome == "reject", ElementRow.type == "offer")
                .where(~ElementRow.hop.in_(select(HopRow.hop)))
                .order_by(ElementRow.digest)
                .limit(1)
            ).scalar()
            busiest = session.execute(
                select(EnvelopeItemRow.case_id)
                .where(EnvelopeItemRow.case_id.is_not(None))
                .where(EnvelopeItemRow.case_id != case_data.CASE)
                .group_by(EnvelopeItemRow.case_id)
                .order_by(func.count().desc(), EnvelopeItemRow.case_id)
                .limit(1)
            ).scalar()
    finally:
        engine.dispose()
    assert hop is not None
    found = {
        "login": "/login",
        "overview": "/",
        "triage": "/flags",
        "triage-urgent": "/flags?view=urgent",
        "triage-acknowledged": "/flags?view=acknowledged",
        "cases": "/cases",
        "case": f"/cases/{quote(case_data.CASE)}",
        "case-demo": f"/cases/{quote(busiest or case_data.CASE)}",
        "dialogs": "/dialogs",
        "dialog": f"/dialogs/{quote(hop.dialog, safe='')}",
        "hops": "/hops",
        "unresolved": "/hops?state=unresolved",
        "hop": f"/hops/{digest_text(hop.offer)}",
        "upload": "/upload",
        "agents": "/agents",
        "trust": "/trust",
        "notifications": "/notifications",
        "search": "/search?q=planner",
    }
    for kind, fid in sorted(flags.items()):
        found[f"flag-{kind}"] = f"/flags/{fid}"
    if loose is not None:
        found["element"] = f"/hops/{digest_text(loose)}"
    if refused is not None:
        found["refused"] = f"/hops/{digest_text(refused)}"
    if refused_hop is not None:
        found["search-refused"] = f"/search?q={quote(refused_hop)}"
    return found


def main(argv: list[str]) -> int:
    out = Path(argv[0]) if argv else REPO / "var" / "screenshots"
    only = set(argv[1:])  # page names to take (all when none)
    out.mkdir(parents=True, exist_ok=True)
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory() as tmp:
        data = build(Path(tmp))
        paths = {k: v for k, v in pages(data.db).items() if not only or k in only}
        with serve_store(data.db, data.trust, data.now) as base, sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
            try:
                for size, (viewport, scheme) in SIZES.items():
                    context = browser.new_context(viewport=viewport, color_scheme=scheme)
                    page = context.new_page()
                    page.goto(base + "/login")
                    page.screenshot(path=str(out / f"login-{size}.png"), full_page=True)
                    page.fill("input[name=username]", "otto")
                    page.fill("input[name=password]", PASSWORD)
                    page.click("button[type=submit]")
                    page.wait_for_load_state("networkidle")
                    for name, path in paths.items():
                        if name == "login":
                            continue
                        page.goto(base + path)
                        page.wait_for_load_state("networkidle")
                        height = page.evaluate("document.documentElement.scrollHeight")
                        page.screenshot(path=str(out / f"{name}-{size}.png"), full_page=True)
                        print(f"{name:28} {size:14} {height:6} px  {path}")
                    if only and "upload-report" not in only:
                        context.close()
                        continue
                    # The upload page with a report: the demo capture, verified only.
                    page.goto(base + "/upload")
                    page.set_input_files("input[name=file]", str(data.capture))
                    page.click("#upload button[type=submit]")
                    page.wait_for_selector("#report .card")
                    page.screenshot(path=str(out / f"upload-report-{size}.png"), full_page=True)
                    context.close()
            finally:
                browser.close()
    print(f"screenshots in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
