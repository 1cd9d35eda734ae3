"""The one place the ingest pipeline and its verify options are built from the settings.

Every entry point that judges or stores (``serve``'s ``/ingest``, ``/verify`` and upload
page, the live tap, ``handoff-trace ingest``, ``import``, ``rederive``, ``demo load``, the
re-judging after a trust change) builds through here, so a setting (the receiver policy,
the lifecycle timers, the envelope types and case rules) can never reach one entry point
and miss another. The core below receives the plain values, never the settings object.
"""

from __future__ import annotations

import gc
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from handoff_context import ObjectIndex, Timing, TrustStore
from sqlalchemy import Engine

from app.envelope.config import EnvelopeConfig
from app.ingest.cases import KnownItems
from app.ingest.verifying import VerifyOptions

if TYPE_CHECKING:
    from app.settings import Settings


@dataclass(frozen=True)
class Pipeline:
    """Everything an ingest needs besides its input."""

    engine: Engine
    trust: TrustStore
    options: VerifyOptions  # profile §12; ``at`` is the receive time of items without one
    timing: Timing = field(default_factory=Timing)
    objects: ObjectIndex = field(default_factory=ObjectIndex)
    envelope: EnvelopeConfig = field(default_factory=EnvelopeConfig)
    # The stored envelope items already read (``KnownItems``), for every ingest through
    # this pipeline; a service passes its own, kept across requests (``build_pipeline``).
    known: KnownItems = field(default_factory=KnownItems, compare=False, repr=False)


def verify_options(settings: Settings, *, at: int, **overrides: Any) -> VerifyOptions:
    """The profile §12 verify parameters from ``settings``; ``overrides`` (receiver,
    dialog, or a per-request skew, ...) win where given (None: not given)."""
    values: dict[str, Any] = {
        "skew": settings.skew,
        "max_lifetime": settings.max_lifetime,
        "max_chain": settings.max_chain,
        "ref_policy": settings.ref_policy,
        "max_element_bytes": settings.max_element_bytes,
    }
    values.update({k: v for k, v in overrides.items() if v is not None})
    return VerifyOptions(at=at, **values)


def build_pipeline(
    settings: Settings,
    engine: Engine,
    trust: TrustStore,
    *,
    options: VerifyOptions,
    objects: ObjectIndex | None = None,
    known: KnownItems | None = None,
) -> Pipeline:
    """The ingest pipeline of this deployment over ``engine``: ``options`` as
    ``verify_options`` made them, the lifecycle timers and the envelope types and case
    rules from ``settings``, and ``objects`` (none: an empty index). ``known``: the stored
    envelope items already read from ``engine``'s database, shared by the pipelines of one
    service (none: a new, empty one)."""
    return Pipeline(
        engine=engine,
        trust=trust,
        options=options,
        timing=settings.timing,
        objects=ObjectIndex() if objects is None else objects,
        envelope=settings.envelope,
        known=KnownItems() if known is None else known,
    )


def freeze_start_up(input_bytes: int | None = None) -> None:
    """What a process about to ingest ``input_bytes`` of capture (None: unknown, a pipe)
    does once, after start-up: every object made so far (modules, the settings, the trust
    store, the pipeline) is moved out of the cyclic garbage collector's sight
    (``gc.freeze``), as ``serve`` does for its workers.

    A full collection walks every tracked object, and the first one an ingest triggers
    found the start-up heap (SQLAlchemy, the models, the library) in view: about a tenth of
    the CPU of ingesting 2,000 elements (BENCHMARKS.md, "Bulk ingest"). The frozen objects
    live as long as the process anyway; what start-up left as garbage is collected first,
    not frozen forever. That collection costs ~60 ms, more than a small ingest (below
    ``FREEZE_FROM_BYTES``, which meets no full collection) would save. Once per process: a
    later call (a test calling the command again) costs nothing."""
    if _FROZEN or (input_bytes is not None and input_bytes < FREEZE_FROM_BYTES):
        return
    gc.collect()
    gc.freeze()
    _FROZEN.append(True)


FREEZE_FROM_BYTES = 512 * 1024  # about 1,000 elements of plain offers
_FROZEN: list[bool] = []  # set once ``freeze_start_up`` ran in this process
