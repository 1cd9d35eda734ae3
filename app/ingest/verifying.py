"""Verification of capture files without a database: carriers -> protocol core -> verdicts.

The ``verify`` command and ``POST /api/v1/verify`` share this path; the ingest pipeline adds
persistence around the same calls.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from handoff_context import (
    AvailableObject,
    Context,
    ObjectIndex,
    Outcome,
    Policy,
    RefPolicy,
    Session,
    TrustStore,
    Verdict,
    Verifier,
)
from handoff_context.errors import Reason

from app.capture.carriers import Carried, CarrierError, ExtractStats, read_capture
from app.ingest.batches import batched
from app.ingest.signatures import Ahead, elements_of, submit_ahead

if TYPE_CHECKING:
    from app.ingest.forked import Helper

# The profile's receiver defaults are the library's (``Policy``), stated once there.
DEFAULTS = Policy()


@dataclass(frozen=True)
class VerifyOptions:
    """The profile §12 verify parameters, with the same names as the CLI and the HTTP API."""

    at: int
    receiver: str | None = None
    dialog: str | None = None
    skew: int = DEFAULTS.skew
    max_lifetime: int = DEFAULTS.max_lifetime
    max_chain: int = DEFAULTS.max_chain
    ref_policy: RefPolicy = DEFAULTS.ref_policy
    max_element_bytes: int = DEFAULTS.max_element

    @property
    def policy(self) -> Policy:
        return Policy(
            skew=self.skew,
            max_lifetime=self.max_lifetime,
            max_chain=self.max_chain,
            ref_policy=self.ref_policy,
            max_element=self.max_element_bytes,
        )


@dataclass
class Report:
    verdicts: list[Verdict]
    skipped: int

    @property
    def counts(self) -> dict[str, int]:
        """Verdicts by outcome (every outcome present), plus totals (profile §12 ``counts``)."""
        return outcome_counts(self.verdicts, skipped=self.skipped)


def outcome_counts(verdicts: Iterable[Verdict], *, skipped: int) -> dict[str, int]:
    counts = {o.value: 0 for o in Outcome}
    total = 0
    for v in verdicts:
        counts[v.outcome.value] += 1
        total += 1
    return {**counts, "verdicts": total, "skipped": skipped}


def load_objects(directory: Path) -> ObjectIndex:
    """Every regular file in ``directory`` is an object; ``NAME.salt`` beside ``NAME`` is the
    salt of a salted digest (and not an object of its own). Raises OSError."""
    files = {p.name: p for p in sorted(directory.iterdir()) if p.is_file()}
    index = ObjectIndex()
    for name, path in files.items():
        if name.endswith(".salt") and name[: -len(".salt")] in files:
            continue
        salt_path = files.get(name + ".salt")
        salt = salt_path.read_bytes() if salt_path else None
        index.add(AvailableObject(name=name, content=path.read_bytes(), salt=salt))
    return index


def context_for(item: Carried, options: VerifyOptions) -> Context:
    """Per-item facts. The carrier's own dialog (A2A contextId) is what the host message
    says, so it wins over a capture record's dialog, which wins over the option."""
    # Profile §10: freshness rules are in NumericDate seconds, so the receive time is floored
    # here; the store keeps the fraction beside it (the order of events within a second).
    return Context(
        now=math.floor(item.received_at) if item.received_at is not None else options.at,
        receiver=item.received_by if item.received_by is not None else options.receiver,
        dialog=item.dialog or item.record_dialog or options.dialog,
    )


def carrier_error_verdict(error: CarrierError) -> Verdict:
    return Verdict(source=error.source, element=None, reason=Reason.MALFORMED, detail=error.detail)


# With a verdict sink: verdicts a pending status may wait behind before it is handed on as
# it is (as ``app.ingest.pipeline.VERDICT_WINDOW`` in ingest).
VERDICT_WINDOW = 4096
# What stands in the session's list for a verdict already handed on.
_HANDED = Verdict(source="", element=None, reason=Reason.MALFORMED, detail="handed on")


def verify_inputs(
    inputs: Iterable[tuple[str, bytes]],
    *,
    trust: TrustStore,
    options: VerifyOptions,
    objects: ObjectIndex | None = None,
    content_type: str | None = None,
    on_verdict: Callable[[Verdict], None] | None = None,
    fork: bool = False,
    jobs: int | None = None,
) -> Report:
    """Verify every element in every input, in order, against one memory (profile §11).

    With ``on_verdict``, each verdict is handed to it in input order once it is final (a
    pending status waits for its offer while fewer than ``VERDICT_WINDOW`` verdicts came
    after it, as in ingest) and the report keeps none: memory does not grow with the input.
    With ``fork``, a large input's signatures are verified ahead by a forked child
    (``app.ingest.forked``): only for a caller that runs one thread (the ``verify`` command).
    ``jobs`` says how many processes verify signatures: None decides by the input and the
    machine (``forked.Helper.start``), 1 verifies in this process alone (no helper, no
    threads), 2 or more always fork the helper (with ``fork``; one child)."""
    helper = None
    if fork and jobs != 1:
        from app.ingest.forked import Helper

        inputs = list(inputs)  # the child reads them too
        helper = Helper.start(
            inputs,
            trust=trust,
            max_element=options.max_element_bytes,
            skew=options.skew,
            content_type=content_type,
            force=jobs is not None,
        )
    try:
        return _verify_inputs(
            inputs, trust, options, objects, content_type, on_verdict, helper, threads=jobs != 1
        )
    finally:
        if helper is not None:
            helper.stop()


def _verify_inputs(
    inputs: Iterable[tuple[str, bytes]],
    trust: TrustStore,
    options: VerifyOptions,
    objects: ObjectIndex | None,
    content_type: str | None,
    on_verdict: Callable[[Verdict], None] | None,
    helper: Helper | None,
    *,
    threads: bool = True,
) -> Report:
    verifier = Verifier(trust=trust, policy=options.policy, objects=objects or ObjectIndex())
    cache = verifier.signature_cache
    assert cache is not None  # the verifier's own (profile §6.1)
    session = Session(verifier)
    stats = ExtractStats()
    limit = options.max_element_bytes

    handed = 0  # session.verdicts[:handed] were handed to on_verdict

    def hand_on(*, final: bool = False) -> None:
        nonlocal handed
        if on_verdict is None:
            return
        verdicts = session.verdicts
        while handed < len(verdicts) and (
            final
            or verdicts[handed].outcome is not Outcome.PENDING
            or len(verdicts) - handed > VERDICT_WINDOW
        ):
            on_verdict(verdicts[handed])
            # The slot stays (the session finds pending statuses by position), the
            # verdict goes; a status judged again after it was handed on is not seen.
            verdicts[handed] = _HANDED
            handed += 1

    def judge(batch: list[Carried | CarrierError], ahead: Ahead) -> None:
        ahead.collect(cache)
        for item in batch:
            if isinstance(item, CarrierError):
                session.add_verdict(carrier_error_verdict(item))
            else:
                session.add(item.value, context_for(item, options), source=item.source)
        hand_on()

    position = 0  # items handed to ``judge`` so far, over every input (the helper's index)
    for name, data in inputs:
        items = read_capture(data, name=name, content_type=content_type, stats=stats)
        # The signatures of the next batch are verified on every core while this one is
        # judged in input order (``app.ingest.signatures``).
        previous: tuple[list[Carried | CarrierError], Ahead] | None = None
        for batch in batched(items):
            if helper is not None:
                helper.before(position, cache)  # what the child verified ahead so far
                position += len(batch)
                judge(batch, Ahead())
                continue
            if not threads:
                judge(batch, Ahead())
                continue
            found = (i for i in batch if not isinstance(i, CarrierError))
            elements = (e for i in found for e in elements_of(i.value, max_element=limit))
            ahead = submit_ahead(elements, trust, cache)
            if previous is not None:
                judge(*previous)
            previous = (batch, ahead)
        if previous is not None:
            judge(*previous)
    if on_verdict is not None:
        hand_on(final=True)
        return Report(verdicts=[], skipped=stats.without_handoff)
    return Report(verdicts=session.verdicts, skipped=stats.without_handoff)
