"""State every instance shares through the database (issue 15, item 1): upload reports
expire and stay their user's; the failed-login counts are in tests/web/test_sessions.py
and, across three served instances, tests/web/test_instances.py."""

from __future__ import annotations

from sqlalchemy import Engine, func, select

from app.store.db import transaction
from app.store.models import UploadReportRow
from app.store.reports import get_report, keep_report
from app.store.tokens import Role
from app.store.users import create_user


def _users(engine: Engine) -> tuple[int, int]:
    with transaction(engine) as session:
        a = create_user(session, username="ada", role=Role.ADMIN, password="x" * 12, now=1)
        b = create_user(session, username="bob", role=Role.READ, password="x" * 12, now=1)
        assert a.id is not None and b.id is not None
        return a.id, b.id


def test_a_report_is_its_users_until_it_expires(engine: Engine) -> None:
    ada, bob = _users(engine)
    with transaction(engine) as session:
        key = keep_report(session, user_id=ada, body=b"{}", now=1000, lifetime=60, keep=4)
    with transaction(engine) as session:
        assert get_report(session, user_id=ada, key=key, now=1059) == b"{}"
        assert get_report(session, user_id=ada, key=key, now=1060) is None
        assert get_report(session, user_id=bob, key=key, now=1001) is None
        assert get_report(session, user_id=ada, key="no-such-key", now=1001) is None
    with transaction(engine) as session:  # keeping another one deletes the expired one
        keep_report(session, user_id=bob, body=b"[]", now=2000, lifetime=60, keep=4)
        keys = set(session.execute(select(UploadReportRow.key)).scalars())
    assert key not in keys and len(keys) == 1


def test_only_the_newest_reports_of_a_user_are_kept(engine: Engine) -> None:
    ada, bob = _users(engine)
    with transaction(engine) as session:
        mine = [
            keep_report(session, user_id=ada, body=b"%d" % i, now=100 + i, lifetime=600, keep=3)
            for i in range(5)
        ]
        keep_report(session, user_id=bob, body=b"b", now=200, lifetime=600, keep=3)
    with transaction(engine) as session:
        kept = [k for k in mine if get_report(session, user_id=ada, key=k, now=300) is not None]
        total = session.execute(select(func.count()).select_from(UploadReportRow)).scalar()
    assert kept == mine[2:] and total == 4
