"""Key history (issue 21 item 3): when each published key was first seen and when it stopped
being valid, and the explicit revocations.

A *window* is one stretch during which a source published a key: opened the first time a
fetch shows it, closed (``stopped_at``) by the first fetch that no longer shows it. A key
that comes back opens a new window (``generation`` + 1). Elements are judged against the
keys valid at their ``iat``; the start of a window is shown but never enforced, because
sources publish keys before they are used and this receiver's first look says nothing
about when a key began to be used.

The history lives behind ``KeyHistoryStore``: in memory for an agent, in the database for
the service, so that every instance of it judges with the same history. ``plan_merge`` is
the one rule both follow, written so that two instances merging concurrently agree: a window
is identified by (source, kid, thumbprint, generation), inserted only if absent, and closed
only while open and only by a fetch made after it opened.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Protocol

from handoff_context._sources import PublishedKey


@dataclass(frozen=True, slots=True)
class KeyWindow:
    source: str
    kid: str
    thumbprint: str
    generation: int
    jwk: str  # canonical public JWK text
    first_seen: int
    stopped_at: int | None = None


@dataclass(frozen=True, slots=True)
class Revocation:
    """An explicit revocation: the keys with this ``thumbprint`` (RFC 7638), or failing that
    every key with this ``kid``, sign nothing after ``at``."""

    at: int
    thumbprint: str | None = None
    kid: str | None = None
    reason: str = ""
    by: str = "configuration"

    def matches(self, kid: str, thumbprint: str) -> bool:
        if self.thumbprint is not None:
            return self.thumbprint == thumbprint
        return self.kid == kid


@dataclass(frozen=True, slots=True)
class MergePlan:
    opens: tuple[KeyWindow, ...]
    closes: tuple[KeyWindow, ...]  # the windows to close, with stopped_at set


def plan_merge(
    existing: Sequence[KeyWindow],
    *,
    source: str,
    fetched_at: int,
    keys: Sequence[PublishedKey],
) -> MergePlan:
    """What one accepted fetch of ``source`` changes in its history ``existing``."""
    mine = [w for w in existing if w.source == source]
    latest: dict[tuple[str, str], KeyWindow] = {}
    for w in sorted(mine, key=lambda w: w.generation):
        latest[(w.kid, w.thumbprint)] = w
    shown = {(k.kid, k.thumbprint): k for k in keys}
    opens: list[KeyWindow] = []
    for ident, key in shown.items():
        last = latest.get(ident)
        if last is None:
            opens.append(KeyWindow(source, key.kid, key.thumbprint, 0, key.jwk, fetched_at))
        elif last.stopped_at is not None and fetched_at > last.stopped_at:
            # Back after it went away (and not a fetch older than the one that closed it).
            opens.append(
                KeyWindow(source, key.kid, key.thumbprint, last.generation + 1, key.jwk, fetched_at)
            )
    closes = tuple(
        replace(w, stopped_at=fetched_at)
        for ident, w in latest.items()
        if ident not in shown and w.stopped_at is None and fetched_at > w.first_seen
    )
    return MergePlan(opens=tuple(opens), closes=closes)


class KeyHistoryStore(Protocol):
    """Where the key history is kept. Implementations apply ``plan_merge``'s plan so that
    concurrent writers agree (insert a window only if absent, close it only while open)."""

    def merge(self, *, source: str, fetched_at: int, keys: Sequence[PublishedKey]) -> MergePlan:
        """Record an accepted fetch; returns what changed."""
        ...

    def windows(self) -> list[KeyWindow]: ...

    def revoke(self, revocation: Revocation) -> bool:
        """Record a revocation; False when the same one was recorded already."""
        ...

    def revocations(self) -> list[Revocation]: ...


class InMemoryHistory:
    """The history of one process (an agent): lost on restart, when the first fetch starts
    it again; a deployment that must keep it across restarts keeps it in a database (the
    service does)."""

    def __init__(self) -> None:
        self._windows: dict[tuple[str, str, str, int], KeyWindow] = {}
        self._revocations: list[Revocation] = []

    def merge(self, *, source: str, fetched_at: int, keys: Sequence[PublishedKey]) -> MergePlan:
        plan = plan_merge(self.windows(), source=source, fetched_at=fetched_at, keys=keys)
        for w in (*plan.opens, *plan.closes):
            self._windows[(w.source, w.kid, w.thumbprint, w.generation)] = w
        return plan

    def windows(self) -> list[KeyWindow]:
        return list(self._windows.values())

    def revoke(self, revocation: Revocation) -> bool:
        if revocation in self._revocations:
            return False
        self._revocations.append(revocation)
        return True

    def revocations(self) -> list[Revocation]:
        return list(self._revocations)
