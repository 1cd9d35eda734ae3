"""The triage queue's order and grouping (app.store.dashboard.triage, triage_groups) on
SQLite and PostgreSQL: worst severity first, then age; similar flags folded into one row."""

from __future__ import annotations

from typing import Any

from app.store import db
from app.store.dashboard import Order, TriageFilter, group_ids, triage, triage_groups, urgent_count
from app.store.models import FlagRow

NOW = 1_800_000_000


def _flag(
    n: int, kind: str, severity: str, opened: int, *, iss: str = "a", variant: str = "v"
) -> FlagRow:
    return FlagRow(
        key=f"{n:064d}",
        kind=kind,
        variant=variant,
        severity=severity,
        evidence=[],
        iss=iss,
        hop=f"hop-{n}",
        opened_at=opened,
        detail=f"flag {n}",
        updated_at=opened,
    )


def _fill(engine: Any, rows: list[FlagRow]) -> dict[str, int]:
    with db.transaction(engine) as session:
        session.add_all(rows)
        session.flush()
        return {r.hop: int(r.id or 0) for r in rows}


def _hops(rows: Any) -> list[str]:
    return [r.flag.flag.hop for r in rows]


def test_severity_comes_before_age(engine: Any) -> None:
    _fill(
        engine,
        [
            _flag(1, "rejected-element", "medium", NOW - 900),
            _flag(2, "host-divergence", "low", NOW - 950),
            _flag(3, "lost-outcome", "high", NOW - 100),
            _flag(4, "equivocation", "critical", NOW - 10),
            _flag(5, "equivocation", "critical", NOW - 500),
        ],
    )
    with db.transaction(engine) as session:
        oldest, total = triage(session, now=NOW)
        newest, _ = triage(session, now=NOW, order=Order.SEVERITY_NEWEST)
        by_age, _ = triage(session, now=NOW, order=Order.OLDEST)
        urgent, n = triage(session, now=NOW, filters=TriageFilter(severities=("critical", "high")))
        count = urgent_count(session, now=NOW)
    assert total == 5
    assert _hops(oldest) == ["hop-5", "hop-4", "hop-3", "hop-1", "hop-2"]
    assert _hops(newest) == ["hop-4", "hop-5", "hop-3", "hop-1", "hop-2"]
    assert _hops(by_age) == ["hop-2", "hop-1", "hop-5", "hop-3", "hop-4"]
    assert n == count == 3 and {r.flag.flag.severity for r in urgent} == {"critical", "high"}


def test_similar_flags_fold_into_one_row_with_a_count(engine: Any) -> None:
    rows = [
        _flag(i, "rejected-element", "medium", NOW - 100 + i, variant="stale") for i in range(11)
    ]
    rows += [
        _flag(20, "rejected-element", "medium", NOW - 50, variant="policy"),
        _flag(21, "rejected-element", "medium", NOW - 40, iss="b", variant="stale"),
        _flag(22, "equivocation", "critical", NOW - 900, variant="content"),
    ]
    ids = _fill(engine, rows)
    with db.transaction(engine) as session:
        groups, total = triage_groups(session, now=NOW)
        members = group_ids(
            session,
            now=NOW,
            filters=TriageFilter(kind="rejected-element", issuer="a", variant="stale"),
            limit=100,
        )
    assert total == 4
    assert groups[0].flag.flag.kind == "equivocation" and groups[0].count == 1
    folded = [g for g in groups if g.count == 11]
    assert len(folded) == 1
    # The group is shown by its newest member.
    assert folded[0].flag.flag.id == ids["hop-10"]
    assert sorted(members) == sorted(ids[f"hop-{i}"] for i in range(11))
    assert sum(g.count for g in groups) == len(rows)


def test_a_commented_flag_outlives_its_condition(engine: Any) -> None:
    from app.store.comments import add_comment, comments_of
    from app.store.flags import sync_flags

    ids = _fill(
        engine, [_flag(1, "lost-outcome", "high", NOW - 10), _flag(2, "lost-outcome", "high", NOW)]
    )
    with db.transaction(engine) as session:
        add_comment(session, flag_id=ids["hop-1"], author="user:otto", body="asking", now=NOW)
    with db.transaction(engine) as session:
        # Neither condition holds any more: the untouched flag goes, the commented one stays.
        sync_flags(session, "a", "hop-1", [], offer=None, now=NOW + 1)
        sync_flags(session, "a", "hop-2", [], offer=None, now=NOW + 1)
    with db.transaction(engine) as session:
        kept = session.get(FlagRow, ids["hop-1"])
        assert kept is not None and kept.status == "resolved"
        assert session.get(FlagRow, ids["hop-2"]) is None
        assert [c.body for c in comments_of(session, flag_id=ids["hop-1"])] == ["asking"]
