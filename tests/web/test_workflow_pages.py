"""The triage workflow over HTTP: a refused form keeps what was typed and says what to fix
(resolve without a note, a snooze in the past or with both a preset and a time, an unknown
assignee, a note too long, nothing selected), snooze presets with the until time and
assignments with the name in the audit log, "resolve and next", "assigned to me", the
acknowledged view, comments, and the designed 404 page."""

from __future__ import annotations

import re

from tests.web import test_pages
from tests.web.test_pages import Dash

dataset = test_pages.dataset
dash = test_pages.dash


def _act(dash: Dash, flag: int, **form: str) -> object:
    data = {"csrf": dash.csrf(), **form}
    return dash.client.post(f"/flags/{flag}/action", data=data, follow_redirects=False)


def test_resolve_without_a_note_is_refused_and_the_form_is_kept(dash: Dash) -> None:
    dash.login("otto")
    flag = dash.data.equivocation_flag
    response = _act(dash, flag, action="resolve", note="   ", assignee="otto")
    assert response.status_code == 422
    html = response.text
    assert "Resolving needs a note saying why" in html
    assert 'aria-describedby="act-error" aria-invalid="true"' in html  # the resolve note
    assert "Two signed offers for one hop" in html  # the page itself, not an error page
    assert "open" in dash.client.get(f"/flags/{flag}").text
    done = _act(dash, flag, action="resolve", note="retry path; ops paged")
    assert done.status_code == 303


def test_a_bulk_resolve_without_a_note_keeps_the_selection(dash: Dash) -> None:
    dash.login("otto")
    flag = dash.data.equivocation_flag
    form = {"ids": [str(flag)], "action": "resolve", "csrf": dash.csrf(), "back": "sort=oldest"}
    response = dash.client.post("/flags/bulk", data=form)
    assert response.status_code == 422
    assert "Resolving needs a note saying why" in response.text
    assert f'name="ids" value="{flag}" checked' in response.text
    assert '<option value="oldest" selected>' in response.text  # the queue's own filters


def test_bulk_apply_with_nothing_selected_says_so(dash: Dash) -> None:
    dash.login("otto")
    form = {"action": "acknowledge", "note": "kept", "csrf": dash.csrf()}
    response = dash.client.post("/flags/bulk", data=form)
    assert response.status_code == 422
    assert "Nothing is selected" in response.text
    assert 'value="kept"' in response.text


def test_snooze_presets_record_their_until_time(dash: Dash) -> None:
    dash.login("otto")
    flag = dash.data.equivocation_flag
    now = dash.data.now
    assert _act(dash, flag, action="snooze", preset="4h").status_code == 303
    page = dash.client.get(f"/flags/{flag}").text
    until = _utc(now + 4 * 3600)
    assert re.search(rf"<strong>snooze</strong> until <time[^>]*>{until}</time>", page)
    api_shape = dash.client.get(f"/flags/{flag}")
    assert api_shape.status_code == 200
    assert _act(dash, flag, action="snooze", preset="tomorrow").status_code == 303
    tomorrow = (now // 86400 + 1) * 86400 + 9 * 3600
    assert f">{_utc(tomorrow)}</time>" in dash.client.get(f"/flags/{flag}").text


def _utc(seconds: int) -> str:
    import time

    return time.strftime("%Y-%m-%d %H:%M:%SZ", time.gmtime(seconds))


def test_a_snooze_in_the_past_keeps_the_form_and_says_what_to_fix(dash: Dash) -> None:
    dash.login("otto")
    flag = dash.data.equivocation_flag
    response = _act(dash, flag, action="snooze", until="2001-01-01T09:30")
    assert response.status_code == 422
    assert "is not in the future" in response.text and "choose a later time" in response.text
    assert 'value="2001-01-01T09:30"' in response.text
    both = _act(dash, flag, action="snooze", until="2099-01-01T09:30", preset="1h")
    assert both.status_code == 422 and "not both" in both.text
    assert 'value="2099-01-01T09:30"' in both.text


def test_an_assignee_must_be_a_known_account_and_the_log_names_them(dash: Dash) -> None:
    dash.login("otto")
    flag = dash.data.equivocation_flag
    typo = _act(dash, flag, action="assign", assignee="otot")
    assert typo.status_code == 422 and "no account named “otot”" in typo.text
    empty = _act(dash, flag, action="assign", assignee="")
    assert empty.status_code == 422 and "Choose whom to assign to" in empty.text
    assert _act(dash, flag, action="assign", assignee="rita").status_code == 303
    assert _act(dash, flag, action="assign", assignee="-").status_code == 303
    audit = dash.client.get(f"/flags/{flag}").text
    audit = audit[audit.index('class="audit"') :]
    assert re.search(r"<strong>assign</strong> to <span class=\"assignee\">.*rita", audit)
    assert '<strong>assign</strong> <span class="muted">(unassigned)</span>' in audit


def test_an_over_long_note_comes_back_to_be_cut(dash: Dash) -> None:
    dash.login("otto")
    flag = dash.data.equivocation_flag
    note = "why " * 1200  # 4,800 characters
    response = _act(dash, flag, action="resolve", note=note)
    assert response.status_code == 422
    assert "The note is 4,800 characters; at most 4,000 are kept" in response.text
    assert note.strip() in response.text  # nothing typed is lost


def test_acknowledged_flags_have_a_view_of_their_own_and_stay_open(dash: Dash) -> None:
    """An acknowledged flag is still open until resolved: "All open" (the default) keeps
    it, as PagerDuty's "Open" and Grafana OnCall's default list do; ``status=open`` and
    "Critical and high" list only the flags nobody has acknowledged."""
    dash.login("otto")
    flag = dash.data.equivocation_flag  # critical
    link = f'href="/flags/{flag}"'
    assert link in dash.client.get("/flags?view=urgent").text
    assert _act(dash, flag, action="acknowledge").status_code == 303
    page = dash.client.get("/flags?view=acknowledged").text
    assert "Acknowledged: someone is on it" in page and link in page
    default = dash.client.get("/flags?group=0").text
    assert link in default and "selected>open or acknowledged</option>" in default
    assert link not in dash.client.get("/flags?group=0&status=open").text
    assert link not in dash.client.get("/flags?view=urgent").text
    assert _act(dash, flag, action="resolve", note="fixed").status_code == 303
    assert link not in dash.client.get("/flags?group=0").text


def test_resolve_and_next_opens_the_next_open_flag(dash: Dash) -> None:
    dash.login("otto")
    flag = dash.data.equivocation_flag
    response = _act(dash, flag, action="acknowledge", note="seen it", then="resolve-next")
    assert response.status_code == 303
    target = response.headers["location"]
    assert re.match(r"^/flags/\d+\?done=", target) and not target.startswith(f"/flags/{flag}?")
    assert "resolved" in dash.client.get(f"/flags/{flag}").text
    assert "this is the next open flag" in dash.client.get(target).text


def test_assigned_to_me_lists_my_flags(dash: Dash) -> None:
    dash.login("otto")
    flag = dash.data.equivocation_flag
    before = dash.client.get("/flags?view=mine").text
    assert "Assigned to me" in before and f'href="/flags/{flag}"' not in before
    assert _act(dash, flag, action="assign", assignee="otto").status_code == 303
    after = dash.client.get("/flags?view=mine").text
    assert f'href="/flags/{flag}"' in after


def test_comments_make_a_thread_on_the_flag(dash: Dash) -> None:
    dash.login("otto")
    flag = dash.data.equivocation_flag
    token = dash.csrf()
    empty = dash.client.post(f"/flags/{flag}/comments", data={"csrf": token, "body": "  "})
    assert empty.status_code == 422 and "the comment is empty" in empty.text
    for body in ("asked the <b>planner</b> team", "they re-signed on retry"):
        done = dash.client.post(
            f"/flags/{flag}/comments", data={"csrf": token, "body": body}, follow_redirects=False
        )
        assert done.status_code == 303
    page = dash.client.get(f"/flags/{flag}").text
    thread = page[page.index('id="comments"') :]
    assert thread.index("asked the &lt;b&gt;planner&lt;/b&gt; team") < thread.index("re-signed")
    assert "user:otto" in thread
    dash.login("rita")
    refused = dash.client.post(f"/flags/{flag}/comments", data={"csrf": dash.csrf(), "body": "x"})
    assert refused.status_code == 403


def test_an_unknown_route_gets_the_designed_page_in_a_browser(dash: Dash) -> None:
    dash.login("rita")
    page = dash.client.get("/no-such-page", headers={"Accept": "text/html,*/*;q=0.8"})
    assert page.status_code == 404 and page.headers["content-type"].startswith("text/html")
    assert "There is no page at this address" in page.text
    assert 'href="/flags?view=urgent"' in page.text  # the header, logged in
    assert page.headers["content-security-policy"]
    api = dash.client.get("/api/v1/no-such-route", headers={"Accept": "text/html"})
    assert api.status_code == 404
    assert api.json()["error"]["code"] == "not-found"
    plain = dash.client.get("/no-such-page")
    assert plain.json()["error"]["code"] == "not-found"


def test_a_rejected_element_flag_names_its_refused_octets(dash: Dash) -> None:
    from handoff_context import digest_text
    from sqlalchemy import select

    from app.store.models import FlagRow, RejectedOctetsRow

    dash.login("rita")
    engine = dash.client.app.state.service.engine  # type: ignore[attr-defined]
    with engine.connect() as c:
        refused = {digest_text(d) for (d,) in c.execute(select(RejectedOctetsRow.digest))}
        flags = list(
            c.execute(
                select(FlagRow.id, FlagRow.evidence).where(FlagRow.kind == "rejected-element")
            )
        )
    named = [(fid, e) for fid, evidence in flags for e in evidence if e in refused]
    assert named, "the data set holds octets refused before parsing, named by a flag"
    flag, digest = named[0]
    page = dash.client.get(f"/flags/{flag}").text
    assert "Refused before it became an element" in page and f'href="/hops/{digest}"' in page
    assert "No stored element for this flag" not in page
