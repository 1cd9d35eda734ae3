"""Exports that cannot be forged (issue #25): every table an operator's work lives in makes
the round trip, and an export cut short, reordered, edited, with a record added, unsigned
or signed by another key is refused with nothing left behind.

Every table of the store is in exactly one of three sets, so a new table must be placed:
``WORK`` (compared row for row between the first store and the imported one),
``DERIVED`` (re-derived by the import, compared between two imports) and ``NEVER``
(never exported, with the reason).
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from handoff_context import new_key
from sqlalchemy import Table, func, select
from sqlmodel import SQLModel

from app.store.db import make_engine, transaction
from app.store.models import (
    CommentRow,
    DeliveryRow,
    FlagRow,
    TokenRow,
    TrustEventRow,
    TrustKeyWindowRow,
    TrustRevocationRow,
    UserRow,
)
from app.store.tokens import Role, create_token
from app.store.users import create_user, sso_user
from tests.databases import Databases
from tests.store.test_transfer import _cli, _importing, _signing, demo  # noqa: F401

WORK = {
    "element", "rejected_octets", "envelope_item", "host_state", "observation",
    "rejected_observation", "action", "flag_comment", "webhook_delivery", "api_token",
    "operator_user", "trust_key_window", "trust_revocation", "trust_event",
}  # fmt: skip
# Re-derived by import from the octets and receipts; a flag's workflow columns are
# operators' work and compared with WORK (``_workflow``).
DERIVED = {
    "flag", "hop", "link", "verdict", "ref_outcome", "replay", "seen_status", "envelope_case",
}  # fmt: skip
NEVER = {
    "web_session": "a browser session is a credential of one login",
    "upload_report": "a report waits an hour for its uploader, then goes",
    "signature_cache": "a cache of verifications under one trust configuration",
    "trust_rejudge": "bookkeeping of re-judgements under a trust store",
    "notify_cursor": "flag ids change in an import; a first start announces nothing old",
    "login_limit": "five minutes of login attempts",
    "write_probe": "the scratch row /readyz writes to prove the database takes writes",
    # The evidence log is over this store's rows by id, which an import renumbers: the
    # importing store starts its own log (the export carries the checkpoint it is consistent
    # with in its header's crit "log" member instead, docs/export.md).
    "tlog_leaf": "the evidence log of this store's rows",
    "tlog_node": "the evidence log of this store's rows",
    "tlog_state": "the evidence log of this store's rows",
    "tlog_checkpoint": "the evidence log of this store's rows",
}


def test_every_table_is_placed() -> None:
    tables = {t.name for t in SQLModel.metadata.sorted_tables}
    assert WORK | DERIVED | set(NEVER) == tables
    assert not (WORK & DERIVED or WORK & set(NEVER) or DERIVED & set(NEVER))


def _content(session: Any, table: Table, keys: dict[int, str]) -> Counter[tuple[Any, ...]]:
    """A table's rows without their own ids, a flag named by its key."""
    query = select(table)
    if table.name == "observation":
        query = query.where(table.c.via.is_(None))  # chain receipts are derived
    if table.name == "host_state":
        query = query.where(table.c.element.is_(False))  # the others ride with elements
    rows: Counter[tuple[Any, ...]] = Counter()
    keep_id = table.name == "webhook_delivery"  # receivers know a call by its id
    for row in session.execute(query).mappings():
        values = []
        for name, value in sorted(row.items()):
            if name == "id" and not keep_id:
                continue
            if name == "flag_id":
                value = keys.get(value, f"gone:{value}")
            values.append((name, json.dumps(value, sort_keys=True, default=repr)))
        rows[tuple(values)] += 1
    return rows


def _snapshot(url: str) -> dict[str, Any]:
    engine = make_engine(url)
    try:
        with transaction(engine) as session:
            keys = {int(i): str(k) for i, k in session.execute(select(FlagRow.id, FlagRow.key))}
            tables = {t.name: t for t in SQLModel.metadata.sorted_tables}
            work = {n: _content(session, tables[n], keys) for n in WORK}
            counts = {
                n: session.execute(select(func.count()).select_from(tables[n])).scalar_one()
                for n in tables
            }
            workflow = {
                tuple(r) for r in session.execute(
                    select(FlagRow.key, FlagRow.status, FlagRow.assignee, FlagRow.note,
                           FlagRow.snoozed_until)
                )
            }  # fmt: skip
    finally:
        engine.dispose()
    return {"work": work, "counts": counts, "workflow": workflow}


@pytest.fixture(scope="module")
def full(demo: dict[str, Any]) -> dict[str, Any]:  # noqa: F811
    """The demo store with operators' work in every table: comments, the webhook log, an
    API token, a local account and an SSO one."""
    engine = make_engine(demo["url"])
    try:
        with transaction(engine) as session:
            flag = session.get(FlagRow, demo["flag"])
            assert flag is not None and flag.id is not None
            session.add(CommentRow(flag_id=flag.id, author="user:ada", at=2, body="looking"))
            session.add(
                DeliveryRow(target="pager", flag_id=flag.id, event="opened", severity="high",
                            body="{}", status="delivered", attempts=1, created_at=3, next_at=3,
                            delivered_at=3, response=204)
            )  # fmt: skip
            create_token(session, name="ci", role=Role.INGEST, now=4)
            # The trust history: a key window, a revocation (of a key no element uses) and
            # the audit log's entry for it.
            session.add(
                TrustKeyWindowRow(
                    source="jwks:https://keys.example/",
                    kid="old-1",
                    thumbprint="t" * 43,
                    generation=1,
                    jwk="{}",
                    first_seen=1,
                    stopped_at=2,
                )
            )
            session.add(
                TrustRevocationRow(
                    kid="old-1", at=2, reason="rotated", actor="token:ci", created_at=2
                )
            )
            session.add(
                TrustEventRow(
                    at=2,
                    kind="revoked",
                    source="jwks:https://keys.example/",
                    detail="kid old-1",
                    keys=[["old-1", "t" * 43]],
                )
            )
            create_user(session, username="ada", role=Role.ADMIN, password="x" * 16, now=5)
            sso_user(session, issuer="https://idp.example", subject="s-1", label="sso-sam",
                     role=Role.READ, now=6)  # fmt: skip
    finally:
        engine.dispose()
    return demo


def _export(full: dict[str, Any], url: str, out: Path) -> None:
    argv = ["export", "--db", url, "--out", str(out), "--include-secrets", *_signing(full)]
    code, _, err = _cli(argv)
    assert code == 0, err


def _import(full: dict[str, Any], url: str, path: Path, *extra: str) -> tuple[int, str]:
    argv = ["import", "--db", url, *_importing(full), "--now", full["now"], *extra, str(path)]
    code, out, err = _cli(argv, HANDOFF_TRACE_REF_POLICY="check-available")
    return code, out + err


def test_the_round_trip_keeps_every_table_of_operators_work(
    full: dict[str, Any], databases: Databases, tmp_path: Path
) -> None:
    first = tmp_path / "first.jsonl"
    _export(full, full["url"], first)
    pg, back = databases.new("postgresql"), databases.new("sqlite")
    code, text = _import(full, pg, first)
    assert code == 0, text
    again = tmp_path / "again.jsonl"
    _export(full, pg, again)
    code, text = _import(full, back, again)
    assert code == 0, text
    for url in (full["url"], pg, back):  # sweeps: the three compared at one clock
        assert _cli(["hops", "--db", url, "--now", full["now"]])[0] == 0
    original, moved, home = _snapshot(full["url"]), _snapshot(pg), _snapshot(back)
    for name in WORK:
        assert original["counts"][name] > 0, f"the test store has no {name} rows"
        assert moved["work"][name] == original["work"][name], name
        assert home["work"][name] == original["work"][name], name
    assert original["counts"]["envelope_case"] > 0
    assert moved["workflow"] >= {w for w in original["workflow"] if w[1] != "open" or any(w[2:])}
    for name in DERIVED:
        assert moved["counts"][name] == home["counts"][name], name
    for name in NEVER:
        assert moved["counts"][name] == 0 or name == "notify_cursor", name


# --- tampered exports ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def exported(full: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("signed") / "store.jsonl"
    _export(full, full["url"], path)
    return path


def _lines(path: Path) -> list[bytes]:
    return path.read_bytes().splitlines(keepends=True)


def _header(lines: list[bytes]) -> dict[str, Any]:
    return dict(json.loads(lines[0]))


def _tampered(how: str, lines: list[bytes], root: Path) -> list[bytes]:
    first, records = lines[0], lines[1:]
    if how == "truncated":
        return [first, *records[: len(records) // 3]]
    if how == "reordered":
        # Two neighbours of one kind swapped: the order of kinds still holds.
        i = next(
            n for n in range(len(records) - 1)
            if records[n] != records[n + 1]
            and all(r.startswith(b'{"t":"element"') for r in records[n : n + 2])
        )  # fmt: skip
        return [first, *records[:i], records[i + 1], records[i], *records[i + 2 :]]
    if how == "audit-actor-edited":
        i = next(n for n, r in enumerate(records) if b'"t":"action"' in r)
        forged = records[i].replace(b'"user:ada"', b'"user:someone-else"')
        assert forged != records[i]
        return [first, *records[:i], forged, *records[i + 1 :]]
    if how == "flag-state-edited":
        i = next(n for n, r in enumerate(records) if b'"status":"open"' in r)
        forged = records[i].replace(b'"status":"open"', b'"status":"resolved"')
        return [first, *records[:i], forged, *records[i + 1 :]]
    if how == "admin-token-added":
        token = {"t": "api_token", "name": "backdoor", "role": "admin", "token_hash": "0" * 64,
                 "created_at": 1, "revoked_at": None, "expires_at": None}  # fmt: skip
        at = next(n for n, r in enumerate(records) if b'"t":"operator_user"' in r)
        added = (json.dumps(token, separators=(",", ":")) + "\n").encode()
        return [first, *records[:at], added, *records[at:]]
    if how == "counts-edited-to-match":
        # Cut short, and the header's counts edited to say so: the signature no longer fits.
        header = _header(lines)
        header["counts"]["observation"] = 0
        kept = [r for r in records if b'"t":"observation"' not in r]
        return [(json.dumps(header) + "\n").encode(), *kept]
    if how == "unsigned":
        header = _header(lines)
        del header["signature"]
        return [(json.dumps(header) + "\n").encode(), *records]
    if how == "signed-by-another-key":
        from app.store.transfer import header_line, sign_header

        other = new_key("Ed25519", kid="export-1")
        return [header_line(sign_header(_header(lines), other)), *records]
    if how == "crit-unknown":
        from handoff_context import import_private_key

        from app.store.transfer import header_line, sign_header

        key = import_private_key(json.loads((root / "export.jwk").read_text()))
        header = {**_header(lines), "checkpoint": "x", "crit": ["checkpoint"]}
        return [header_line(sign_header(header, key)), *records]
    raise AssertionError(how)


TAMPERING = {
    "truncated": "cut short",
    "reordered": "changed, reordered",
    "audit-actor-edited": "changed, reordered",
    "flag-state-edited": "changed, reordered",
    "admin-token-added": "cut short or was changed",
    "counts-edited-to-match": "changed after it was signed",
    "unsigned": "not signed",
    "signed-by-another-key": "does not verify",
    "crit-unknown": "header members this version lacks",
}


@pytest.mark.parametrize("how", sorted(TAMPERING))
def test_a_tampered_export_is_refused_and_leaves_nothing(
    how: str, full: dict[str, Any], exported: Path, databases: Databases, tmp_path: Path
) -> None:
    path = tmp_path / f"{how}.jsonl"
    path.write_bytes(b"".join(_tampered(how, _lines(exported), full["root"])))
    url = databases.new("sqlite")
    code, text = _import(full, url, path)
    assert code == 2, text
    assert TAMPERING[how] in text and "nothing was imported" in text
    counts = _snapshot(url)["counts"]
    assert all(n == 0 for n in counts.values()), {k: n for k, n in counts.items() if n}
    # And the same database takes the export as it was signed.
    code, text = _import(full, url, exported)
    assert code == 0, text


def test_a_failed_import_leaves_nothing_behind(
    full: dict[str, Any], exported: Path, databases: Databases
) -> None:
    # The database already holds an admin token of the same name: the copy fails at its
    # end, inside the one transaction, and the store is as it was.
    url = databases.new("postgresql")
    engine = make_engine(url)
    try:
        with transaction(engine) as session:
            create_token(session, name="ci", role=Role.ADMIN, now=1)
    finally:
        engine.dispose()
    code, text = _import(full, url, exported)
    assert code == 2 and "nothing was imported" in text, text
    counts = _snapshot(url)["counts"]
    assert {k: n for k, n in counts.items() if n} == {"api_token": 1}
    engine = make_engine(url)
    try:
        with transaction(engine) as session:
            assert session.execute(select(UserRow)).first() is None
            assert session.execute(select(TokenRow.name)).scalars().all() == ["ci"]
    finally:
        engine.dispose()


def test_the_header_says_what_the_file_holds(exported: Path) -> None:
    header = _header(_lines(exported))
    assert header["version"] == 2 and header["crit"] == []
    assert header["records"].startswith("sha-256:")
    assert sum(header["counts"].values()) == len(_lines(exported)) - 1
    assert header["counts"]["envelope_item"] > 0 and header["counts"]["comment"] > 0
