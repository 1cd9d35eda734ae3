"""The one batch runner of ingest, for signed elements and envelope items alike.

Items are taken in batches of up to ``BATCH_ITEMS``, and a batch is first tried in one
transaction (``attempt``). An attempt either keeps a prefix of the batch and names the item
that failed inside it (the items before it are committed; the failed one is then run alone
and a new batch starts after it), or fails as a whole (``SQLAlchemyError`` or
``BatchFailed``: nothing of it was kept) and each of its items is run alone. An item run
alone is reported on its own when it fails again, so a bad item never spoils the rest of
its batch and nothing is lost; input order is kept throughout.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, TypeVar

from app.errors import HandoffTraceError, NotStored

# Only for annotations: verify (no database) uses ``batched`` and should not load SQLAlchemy.
if TYPE_CHECKING:
    from sqlalchemy.exc import SQLAlchemyError

T = TypeVar("T")
R = TypeVar("R")

# Items per transaction. Since a batch writes each table with one statement and derives
# its hops once, what a batch costs beside its items is fixed: 256 items a batch took 15 to
# 20 % less CPU per element than 64 on the simulator's mixed capture, and 512 no less than
# 256 (bench/ingest_cpu.py, BENCHMARKS.md #13), while SQLite's write lock is held for about
# a tenth of a second.
BATCH_ITEMS = 256
BUSY = "busy: too many concurrent writers"


class BatchFailed(HandoffTraceError):
    """An attempt that kept nothing of its batch for a reason other than a database error
    (on PostgreSQL: it never got the locks it needed)."""

    reason = "batch-failed"

    def __init__(self, detail: str = "the batch kept nothing") -> None:
        super().__init__(detail)


class ItemFailed(HandoffTraceError):
    """An attempt that kept nothing of its batch because the item at ``index`` failed (an
    attempt without a savepoint per item, SQLite's): the items before it are tried again
    as a batch, it is run alone, and a new batch starts after it."""

    reason = "item-failed"

    def __init__(self, index: int) -> None:
        super().__init__(f"item {index} failed")
        self.index = index


def batched(items: Iterable[T], size: int = BATCH_ITEMS) -> Iterator[list[T]]:
    iterator = iter(items)
    while batch := list(itertools.islice(iterator, size)):
        yield batch


def run_batch(
    batch: Sequence[T],
    *,
    attempt: Callable[[Sequence[T]], tuple[list[R], int]],
    alone: Callable[[T], R],
    stop: Callable[[R], bool] | None = None,
) -> list[R]:
    """What became of the items of ``batch``, in input order.

    ``attempt(items)`` returns the results of the items it kept and the index of the item
    that failed (``len(items)`` when none did), or raises ItemFailed, SQLAlchemyError or
    BatchFailed when it kept nothing. ``alone(item)`` runs one item in a transaction of its own and
    never raises for a failing item (it returns the error as its result). With ``stop``,
    the run ends at the first result of ``alone`` that ``stop`` holds for (a database that
    cannot be written: trying the rest one by one would only fail again, slowly): fewer
    results than items come back, and the items after the last result were not run."""
    from sqlalchemy.exc import SQLAlchemyError

    results: list[R] = []

    def run_alone(item: T) -> bool:
        """Run one item alone; whether to go on."""
        result = alone(item)
        results.append(result)
        return stop is None or not stop(result)

    rest = batch
    while rest:
        try:
            done, failed = attempt(rest)
        except ItemFailed as exc:
            if exc.index:
                before = run_batch(rest[: exc.index], attempt=attempt, alone=alone, stop=stop)
                results.extend(before)
                if len(before) < exc.index or (stop is not None and before and stop(before[-1])):
                    return results
            if not run_alone(rest[exc.index]):
                return results
            rest = rest[exc.index + 1 :]
            continue
        except (SQLAlchemyError, BatchFailed):
            for item in rest:
                if not run_alone(item):
                    return results
            break
        results.extend(done)
        if failed >= len(rest):
            break
        if not run_alone(rest[failed]):
            return results
        rest = rest[failed + 1 :]
    return results


def database_error(exc: SQLAlchemyError) -> str:
    """The detail an item error reports for a database error: its first line."""
    first_line = str(getattr(exc, "orig", None) or exc).strip().splitlines()[0][:200]
    return f"database error: {first_line}"


def not_stored(source: str, exc: SQLAlchemyError) -> NotStored:
    """What an item that met a database error reports: not stored, and whether the database
    is unavailable (``unavailable``) rather than refusing this item."""
    from app.store.db import unavailable

    return NotStored(source, database_error(exc), unavailable=unavailable(exc))
