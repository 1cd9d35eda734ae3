"""Who a flag may be assigned to: the assignee picker's list and its "nobody"."""

from __future__ import annotations

from typing import Any

from app.store.users import list_users

NOBODY = "-"  # the assignee picker's "nobody": an explicit unassign, never an empty field


def people_of(service: Any) -> list[str]:
    """The accounts a flag may be assigned to: every enabled dashboard user, by name."""
    with service.reading() as session:
        return [u.username for u in list_users(session) if u.disabled_at is None]
