"""``demo --load``: ingest a freshly written run into the configured database.

The run goes through the one ingest pipeline (``app.ingest.pipeline``) like any capture, with the
run's own trust file and ref objects (``check-available``, so ref mismatches show), and the
database the command line chose (``DATABASE_URL``, else the embedded SQLite file). The
settings are read by the command line and handed in; nothing here reads the environment.
"""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING

from handoff_context import RefPolicy, TrustStore
from handoff_context.errors import TrustConfigError

from app.demo.output import DemoPaths
from app.errors import HandoffTraceError
from app.ingest.verifying import load_objects

if TYPE_CHECKING:
    from app.settings import Settings


class DemoLoadError(HandoffTraceError):
    """The run cannot be loaded: a bad setting, an unusable trust file or database."""

    reason = "demo-load"


def load_run(paths: DemoPaths, *, now: int | None, settings: Settings, url: str) -> int:
    """Ingest the run's capture files; returns the exit status (0, or 2 for an item error).
    Raises DemoLoadError when the settings, the trust file or the database cannot be used."""
    from sqlalchemy.exc import SQLAlchemyError

    from app.ingest.build import build_pipeline, verify_options
    from app.ingest.pipeline import ingest
    from app.store import db

    try:
        engine = db.make_engine(url)
        db.ensure_schema(engine)
        trust = TrustStore.load(paths.trust)
    except (db.UnsupportedDatabase, TrustConfigError) as exc:
        raise DemoLoadError(str(exc)) from exc
    except SQLAlchemyError as exc:
        raise DemoLoadError(f"cannot use the database: {str(exc).splitlines()[0][:200]}") from exc
    clock = int(time.time())
    options = verify_options(settings, at=clock, ref_policy=RefPolicy.CHECK_AVAILABLE)
    objects = load_objects(paths.objects)
    pipeline = build_pipeline(settings, engine, trust, options=options, objects=objects)
    try:
        with paths.out.open("rb") as out, paths.cbor.open("rb") as cbor:
            # Streamed, keeping counts rather than verdicts: a run can be many GB.
            inputs = [(str(paths.out), out), (str(paths.cbor), cbor)]
            report = ingest(pipeline, inputs, now=clock, on_verdict=lambda _verdict: None)
    finally:
        engine.dispose()
    counts = report.counts
    print(
        f"demo: loaded {counts['verdicts']} verdicts ({counts['stored']} new elements, "
        f"{counts['reject']} rejected, {counts['errors']} item errors)",
        file=sys.stderr,
    )
    for error in report.errors[:10]:
        print(f"demo: {error.source}: {error.detail}", file=sys.stderr)
    if now is not None and clock < now:
        print(
            f"demo: the simulated clock runs past the wall clock; time-based flags show "
            f"with --now {now}, or once the wall clock passes it",
            file=sys.stderr,
        )
    print(
        f"demo: serve with HANDOFF_TRACE_TRUST_FILE={paths.trust} so the store keeps "
        "the same trust configuration",
        file=sys.stderr,
    )
    return 2 if report.errors else 0
