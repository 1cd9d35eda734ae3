"""The reads of a batch's flags, envelope cases and host task states run through the
driver (``db.select_rows``, ``db.select_named``): each answers exactly what SQLAlchemy's
own execution of the same prebuilt statement answers, value for value and type for type,
read by name as by position, on both databases, over the simulator's mixed capture."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from handoff_context import RefPolicy, TrustStore
from sqlalchemy import insert, select, update

from app.demo import DemoConfig, DemoPaths, write_demo
from app.ingest.pipeline import Pipeline, ingest
from app.ingest.verifying import VerifyOptions, load_objects
from app.store import envelopes, flags, host
from app.store.db import make_engine, pair_params, select_named, select_rows, transaction
from app.store.models import (
    ActionRow,
    EnvelopeItemRow,
    FlagRow,
    HostStateRow,
    ObservationRow,
)


def _typed(row: Any) -> tuple[tuple[type, Any], ...]:
    return tuple((type(v), v) for v in row)


def test_the_driver_reads_of_flags_cases_and_tasks_answer_what_sqlalchemy_answers(
    db_url: str, tmp_path: Path
) -> None:
    paths = DemoPaths.beside(tmp_path / "capture.jsonl", trust=None, answers=None)
    summary = write_demo(DemoConfig(seed=7, dialogs=12, agents=6, fault_rate=0.3), paths)
    engine = make_engine(db_url)
    try:
        pipeline = Pipeline(
            engine=engine,
            trust=TrustStore.load(paths.trust),
            options=VerifyOptions(at=summary.suggested_now, ref_policy=RefPolicy.CHECK_AVAILABLE),
            objects=load_objects(paths.objects),
        )
        inputs = [(str(p), p.read_bytes()) for p in (paths.out, paths.cbor)]
        report = ingest(pipeline, inputs, now=summary.suggested_now)
        assert not report.errors
        with transaction(engine) as session:
            flag_rows = session.execute(select(FlagRow.id, FlagRow.iss, FlagRow.hop)).all()
            # Someone acted on one flag: what ``_acted`` reads.
            at = summary.suggested_now
            action = {"flag_id": flag_rows[0].id, "actor": "t", "at": at, "action": "note"}
            session.execute(insert(ActionRow).values(**action))
            # A shipper's observation ids, on a receipt and on a host task state.
            first = session.execute(select(ObservationRow.id).limit(2)).scalars().all()
            for n, observation in enumerate(first):
                session.execute(
                    update(ObservationRow)
                    .where(ObservationRow.id == observation)
                    .values(observation_key=f"shipped-{n}")
                )
            state = {"task_id": "t1", "task_state": "working", "received_at": at, "source": "s"}
            state |= {"ingested_at": at, "observation_key": "shipped-host"}
            session.execute(insert(HostStateRow).values(**state))
            # An item whose case could not be read.
            key = session.execute(select(EnvelopeItemRow.key).limit(1)).scalar_one()
            session.execute(
                update(EnvelopeItemRow).where(EnvelopeItemRow.key == key).values(case_id=None)
            )
            items = session.execute(
                select(EnvelopeItemRow.key, EnvelopeItemRow.case_id, EnvelopeItemRow.context_id)
            ).all()
            observed = session.execute(
                select(ObservationRow.observation_key, ObservationRow.task_id)
            ).all()
            host_keys = session.execute(select(HostStateRow.observation_key)).scalars().all()
            params: dict[str, Any] = {
                **pair_params({(r.iss, r.hop) for r in flag_rows}),
                "b_ids": [r.id for r in flag_rows],
                "b_cases": sorted({r.case_id for r in items if r.case_id}),
                "b_contexts": sorted({r.context_id for r in items if r.context_id}),
                "b_keys": sorted(
                    {r.key for r in items}
                    | {r.observation_key for r in observed if r.observation_key}
                    | {k for k in host_keys if k}
                ),
                "b_tasks": sorted({r.task_id for r in observed if r.task_id}),
            }
            statements = {
                "hop flags": flags._HOPS_FLAGS,
                "case flags": flags._CASES_FLAGS,
                "acted": flags._ACTED_ANY,
                "context cases": envelopes._CONTEXT_CASES,
                "case items": envelopes._CASES_ITEMS,
                "items without a case": envelopes._UNKNOWN_ITEMS,
                "case keys": envelopes._CASES_KEYS,
                "keys without a case": envelopes._UNKNOWN_KEYS,
                "items by key": envelopes._ITEMS_BY_KEY,
                "context items": envelopes._CONTEXT_ITEMS,
                "observation keys": host._KNOWN_OBSERVATIONS,
                "host state keys": host._KNOWN_HOST,
                "task hops": host._TASK_HOPS,
            }
            empty = []
            for name, statement in statements.items():
                wanted = {k: v for k, v in params.items() if k in statement.compile().params}
                through_sqlalchemy = session.connection().execute(statement, wanted).all()
                named = select_named(session, statement, wanted)
                plain = select_rows(session, statement, wanted)
                assert [tuple(r) for r in named] == plain, name
                assert sorted(map(_typed, plain), key=repr) == sorted(
                    map(_typed, through_sqlalchemy), key=repr
                ), name
                by_name = sorted(named, key=repr)
                for mine, theirs in zip(by_name, sorted(through_sqlalchemy, key=repr), strict=True):
                    for column in theirs._fields:
                        assert getattr(mine, column) == getattr(theirs, column), (name, column)
                if not plain:
                    empty.append(name)
            assert not empty, f"every read reads something back: {empty}"
            session.rollback()
    finally:
        engine.dispose()
