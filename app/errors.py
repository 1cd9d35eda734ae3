"""The service's errors: one base, ``HandoffTraceError``, and one record for a per-item
problem, ``ItemProblem``.

Every exception the service raises on purpose derives from ``HandoffTraceError`` and
carries a machine ``reason`` (a short kebab-case code, one per kind unless the raiser says
otherwise) and a human ``detail`` (one line, what ``str(exc)`` prints). The edges translate
the base once: the CLI's ``main`` prints the detail and exits 2 (``app.cli.root``), the web
error handler answers it in the one error shape (``app.web.errors``). The protocol
library's own errors (``handoff_context.errors``) stay the library's.

A bad item of a batch is never an exception: it is an ``ItemProblem`` naming where it was
and what was wrong, and the rest of the batch goes on.
"""

from __future__ import annotations

from dataclasses import dataclass


class HandoffTraceError(Exception):
    """An error the service raises on purpose: ``reason`` for machines, ``detail`` for
    people. Subclasses name their default ``reason``."""

    reason: str = "error"

    def __init__(self, detail: str, *, reason: str | None = None) -> None:
        # Exception.__init__ directly rather than super(): a subclass that is also another
        # library's exception (PayloadTooLarge is a Starlette HTTPException) must not have
        # its other base's constructor called with our arguments.
        Exception.__init__(self, detail)
        self.detail = detail
        if reason is not None:
            self.reason = reason

    def __str__(self) -> str:
        return self.detail


@dataclass(frozen=True)
class ItemProblem:
    """One item of an input that could not be used, and the rest went on: ``source`` names
    the item ("capture.jsonl:3", "cap.har:entries[2].response"), ``detail`` says what.

    It is the capture reader's malformed item (``CarrierError``), the ingest's item that the
    database could not store (nothing of it kept), and the envelope item that is invalid
    (stored as evidence, never applied to a ledger).
    """

    source: str
    detail: str


@dataclass(frozen=True)
class NotStored(ItemProblem):
    """An item the database did not store (nothing of it kept): sending it again may
    succeed. ``unavailable``: the database could not be written at all (an outage, a full
    disk, a read-only database), so the input was cut short at this item."""

    unavailable: bool = False
