"""The forms that act on flags: one flag's action (``/flags/{id}/action``), the queue's bulk
action (``/flags/bulk``) and a flag's comments (``/flags/{id}/comments``).

Actions go through ``app.store.queries.act_on_flag``, which writes the audit log with who
(``user:NAME``) and when; a form that succeeds redirects back (post/redirect/get), so a
reload never repeats it and the queue keeps its filters. A form that cannot apply (resolve
without a note, a snooze in the past, nothing selected) is answered 422 with the same page,
the form as it was sent, and one sentence saying what to fix: nothing typed is lost
(a note longer than the store keeps included).

The queue's rows and the flag page act in one click (acknowledge, assign to me, snooze for a
preset, resolve with a note): each is a small form of its own posting here, so only the
values of the action clicked are sent. An assignee must be a known account (or ``-`` to
unassign, said explicitly); a snooze takes a preset or a time, never both.
"""

from __future__ import annotations

import calendar
import time
from dataclasses import dataclass
from typing import Annotated, Any
from urllib.parse import parse_qs, urlencode

from fastapi import APIRouter, Form, Path, Request
from fastapi.responses import RedirectResponse, Response
from handoff_context import MAX_SAFE_INT

from app.errors import HandoffTraceError
from app.store import dashboard, db
from app.store.comments import CommentError, add_comment
from app.store.queries import FlagAction, FlagActionError, FlagStatus, act_on_flag
from app.web.params import storable
from app.web.people import NOBODY, people_of
from app.web.render import secure, utc
from app.web.service import ServiceDep
from app.web.sessions import Triager
from app.web.triage import (
    PER_PAGE,
    STATUS_VALUES,
    flag_view,
    params_of,
    queue_page,
    read_queue,
)

router = APIRouter(include_in_schema=False)
FlagId = Annotated[int, Path(ge=1, le=MAX_SAFE_INT)]
BULK_LIMIT = 200
DAY = 86400
MAX_NOTE = 4000  # what the store keeps of a note; a longer one comes back to be cut


class FormError(HandoffTraceError, ValueError):
    """A form that cannot apply as sent; the message says what to fix."""

    reason = "bad-form"


@dataclass(frozen=True)
class Sent:
    """An action form as sent."""

    action: str = ""
    note: str = ""
    assignee: str = ""
    until: str = ""
    preset: str = ""

    def kept(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in ("action", "note", "assignee", "until", "preset")}


def snooze_until(sent: Sent, now: int) -> int:
    """The snooze's end: a preset (1 h, 4 h, tomorrow 09:00 UTC) or a ``YYYY-MM-DDTHH:MM``
    datetime-local field read as UTC. Raises FormError."""
    if sent.preset and sent.until:
        raise FormError("Pick a preset or a time to snooze until, not both: clear one of them.")
    if sent.preset == "1h":
        return now + 3600
    if sent.preset == "4h":
        return now + 4 * 3600
    if sent.preset == "tomorrow":
        return (now // DAY + 1) * DAY + 9 * 3600
    if not sent.until:
        raise FormError("Snoozing needs a time: pick a preset or fill in “until”.")
    try:
        until = calendar.timegm(time.strptime(sent.until[:16], "%Y-%m-%dT%H:%M"))
    except ValueError as exc:
        raise FormError("The snooze time must look like 2026-12-01T09:30 (UTC).") from exc
    if until <= now:
        raise FormError(
            f"The snooze time {utc(until)} is not in the future (it is now {utc(now)}): "
            "choose a later time or a preset."
        )
    return until


def _check(
    sent: Sent, ids: list[int], now: int, people: list[str]
) -> tuple[FlagAction, int | None]:
    """The action and snooze time the form asks for; ``people`` are the accounts a flag may
    be assigned to. Raises FormError saying what to fix."""
    try:
        chosen = FlagAction(sent.action)
    except ValueError as exc:
        raise FormError("Choose an action.") from exc
    if not ids:
        raise FormError(
            "Nothing is selected: tick the box of at least one flag (or press x on a row), "
            "then apply."
        )
    if len(ids) > BULK_LIMIT:
        raise FormError(f"At most {BULK_LIMIT} flags at a time; narrow the queue first.")
    try:
        storable(sent.note)
        storable(sent.assignee)
    except ValueError as exc:
        raise FormError("The note and assignee must be plain text (no NUL).") from exc
    if len(sent.note) > MAX_NOTE:
        raise FormError(
            f"The note is {len(sent.note):,} characters; at most {MAX_NOTE:,} are kept: "
            "shorten it (your text is below)."
        )
    if chosen is FlagAction.ASSIGN:
        who = sent.assignee.strip()
        if not who:
            raise FormError(f"Choose whom to assign to (or “{NOBODY}”, nobody, to unassign).")
        if who != NOBODY and who not in people:
            raise FormError(
                f"There is no account named “{who[:64]}”: choose one of "
                f"{', '.join(people[:12]) or 'the accounts'} (or “{NOBODY}” to unassign)."
            )
    if chosen is FlagAction.RESOLVE and not sent.note.strip():
        raise FormError("Resolving needs a note saying why: what you found, who you asked.")
    if chosen is FlagAction.NOTE and not sent.note.strip():
        raise FormError("Write the note first: it is empty.")
    until = snooze_until(sent, now) if chosen is FlagAction.SNOOZE else None
    return chosen, until


def _apply(service: Any, user: Any, ids: list[int], sent: Sent) -> str:
    """Apply the form to every flag in ``ids`` in one transaction; what was done, in words
    (for the confirmation). Raises FormError."""
    now = service.clock()
    chosen, until = _check(sent, ids, now, people_of(service))
    who = sent.assignee.strip()
    assignee = None if who == NOBODY else who

    def work(session: Any) -> int:
        for flag_id in ids:
            act_on_flag(
                session,
                flag_id=flag_id,
                actor=user.actor,
                action=chosen,
                now=now,
                note=sent.note.strip() or None,
                assignee=assignee if chosen is FlagAction.ASSIGN else None,
                snoozed_until=until,
            )
        return len(ids)

    try:
        db.run(service.engine, work)
    except FlagActionError as exc:
        raise FormError(f"{str(exc).capitalize()}.") from exc
    return said(chosen, assignee=assignee, until=until)


def said(action: FlagAction, *, assignee: str | None, until: int | None) -> str:
    """An action as the confirmation and the audit log say it, with its values."""
    if action is FlagAction.ASSIGN:
        return f"assigned to {assignee}" if assignee else "unassigned"
    if action is FlagAction.SNOOZE and until is not None:
        return f"snoozed until {utc(until)}"
    return {
        FlagAction.ACKNOWLEDGE: "acknowledged",
        FlagAction.RESOLVE: "resolved",
        FlagAction.REOPEN: "reopened",
        FlagAction.NOTE: "noted",
    }.get(action, action.value)


def _back(target: str, done: str) -> Response:
    joiner = "&" if "?" in target else "?"
    return secure(RedirectResponse(f"{target}{joiner}{urlencode({'done': done})}", status_code=303))


def _safe_query(text: str) -> str:
    return text if text and "\n" not in text and "\r" not in text and len(text) < 2000 else ""


def _members(service: Any, groups: list[str], back: str) -> list[int]:
    """The ids folded into the chosen group rows, among the flags the queue showed (its
    status filter travels in ``back``)."""
    shown = parse_qs(back).get("status", [dashboard.OPEN_OR_ACKNOWLEDGED])[0]
    status = None if shown == "any" else shown if shown in STATUS_VALUES else None
    found: list[int] = []
    with service.reading() as session:
        for text in groups[:BULK_LIMIT]:
            key = parse_qs(text)
            filters = dashboard.TriageFilter(
                kind=key.get("kind", [""])[0] or None,
                issuer=key.get("issuer", [""])[0] or None,
                variant=key.get("variant", ["-"])[0],
                status=status,
            )
            if filters.kind is None or filters.issuer is None:
                continue
            found += dashboard.group_ids(
                session, now=service.clock(), filters=filters, limit=BULK_LIMIT + 1
            )
    return found


# Longer than the store keeps, so an over-long note comes back on the page to be cut
# (FormError) instead of as a bare validation error that loses it.
Field = Annotated[str, Form(max_length=64 * 1024)]


@router.post("/flags/bulk")
def bulk(
    request: Request,
    user: Triager,
    service: ServiceDep,
    ids: Annotated[list[int], Form()] = [],  # noqa: B006 (FastAPI copies defaults)
    groups: Annotated[list[str], Form(max_length=4000)] = [],  # noqa: B006 (as above)
    action: Annotated[str, Form(max_length=32)] = "",
    note: Field = "",
    assignee: Annotated[str, Form(max_length=200)] = "",
    until: Annotated[str, Form(max_length=40)] = "",
    preset: Annotated[str, Form(max_length=16)] = "",
    back: Annotated[str, Form(max_length=2000)] = "",
    at: Annotated[str, Form(max_length=8)] = "",
) -> Response:
    sent = Sent(action, note, assignee, until, preset)
    query = _safe_query(back)
    picked = [i for i in ids if 0 < i <= MAX_SAFE_INT]
    try:
        chosen = list(dict.fromkeys(picked + _members(service, groups, query)))
        done = _apply(service, user, chosen, sent)
    except FormError as exc:
        form = {**sent.kept(), "ids": set(picked), "groups": set(groups)}
        params = params_of(query)
        return queue_page(request, user, service, params, form=form, error=str(exc), status=422)
    if at.isdigit() and int(at) <= PER_PAGE:
        place = int(at)
        # One row acknowledged stays in a queue that lists acknowledged flags ("All open"):
        # the cursor moves on to the next row, so the next key acts on the next flag. A row
        # that left the queue (resolved, snoozed, or acknowledged in "Critical and high")
        # has its place taken by the next one already.
        if sent.action == FlagAction.ACKNOWLEDGE and len(chosen) == 1:
            status = read_queue(user, **params_of(query)).filters.status
            if status in (None, dashboard.OPEN_OR_ACKNOWLEDGED, FlagStatus.ACKNOWLEDGED):
                place = min(place + 1, PER_PAGE)
        query = f"{query}&at={place}" if query else f"at={place}"
    count = f"{len(chosen)} flags" if len(chosen) != 1 else f"#{chosen[0]}"
    return _back("/flags" + (f"?{query}" if query else ""), f"{count} {done}")


def _next_open(service: Any, skip: int) -> int | None:
    """The flag to work on next: the head of the open queue (worst first, then oldest)."""
    with service.reading() as session:
        rows, _ = dashboard.triage(
            session,
            now=service.clock(),
            filters=dashboard.TriageFilter(status=FlagStatus.OPEN.value),
            limit=2,
        )
    ids = [r.flag.flag.id for r in rows if r.flag.flag.id != skip]
    return ids[0] if ids else None


@router.post("/flags/{flag_id}/action")
def act(
    request: Request,
    flag_id: FlagId,
    user: Triager,
    service: ServiceDep,
    action: Annotated[str, Form(max_length=32)] = "",
    note: Field = "",
    assignee: Annotated[str, Form(max_length=200)] = "",
    until: Annotated[str, Form(max_length=40)] = "",
    preset: Annotated[str, Form(max_length=16)] = "",
    then: Annotated[str, Form(max_length=16)] = "",
) -> Response:
    # "Resolve and next" resolves whatever the action list says.
    sent = Sent("resolve" if then == "resolve-next" else action, note, assignee, until, preset)
    try:
        done = _apply(service, user, [flag_id], sent)
    except FormError as exc:
        return flag_view(
            request, flag_id, user, service, form=sent.kept(), error=str(exc), status=422
        )
    if then == "resolve-next":
        following = _next_open(service, flag_id)
        if following is None:
            return _back("/flags", f"#{flag_id} {done}; nothing else is open")
        return _back(f"/flags/{following}", f"#{flag_id} {done}; this is the next open flag")
    return _back(f"/flags/{flag_id}", f"#{flag_id} {done}")


@router.post("/flags/{flag_id}/comments")
def comment(
    request: Request,
    flag_id: FlagId,
    user: Triager,
    service: ServiceDep,
    body: Field = "",
) -> Response:
    now = service.clock()
    try:
        storable(body)
        db.run(
            service.engine,
            lambda s: add_comment(s, flag_id=flag_id, author=user.actor, body=body, now=now),
        )
    except (CommentError, ValueError) as exc:
        message = str(exc) if isinstance(exc, CommentError) else "A comment must be plain text."
        form = {"comment": body}
        return flag_view(request, flag_id, user, service, form=form, error=message, status=422)
    return secure(RedirectResponse(f"/flags/{flag_id}#comments", status_code=303))
