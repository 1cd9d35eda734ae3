"""What an ingest reports: profile §11 verdicts in input order, plus what the store made of
them, bounded when a sink takes the verdicts as they become final."""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field

from handoff_context import Outcome, Verdict

from app.errors import ItemProblem as ItemError  # an item that could not be stored
from app.errors import NotStored
from app.ingest.envelope import EnvelopeReport

# With ``on_verdict``: verdicts kept for a later item to complete (a pending status whose
# offer arrives later in the same run) before they are handed on as they are.
VERDICT_WINDOW = 4096


@dataclass
class IngestReport:
    """Profile §11 verdicts in input order, plus what the store made of them.

    Without ``sink`` every verdict is kept in ``verdicts``. With one, each verdict is handed
    to it, in input order, once ``VERDICT_WINDOW`` later verdicts have been made (or at the
    end), and only those not yet handed on stay in ``verdicts`` (none once ``ingest``
    returns). A verdict judged again by a later item of the same run (a pending status
    whose offer comes later) is handed on in its final form when that item lies within the
    window. ``counts`` covers every verdict either way, in the shape of
    ``verifying.outcome_counts`` plus ``errors`` and ``stored``.
    """

    verdicts: list[Verdict] = field(default_factory=list)
    errors: list[ItemError] = field(default_factory=list)
    skipped: int = 0  # items with neither a signed handoff nor an envelope item
    stored: int = 0  # elements stored for the first time
    # Observations whose observation id was stored already (a shipper's retry): neither
    # stored nor judged again, and never counted as a duplicate.
    redelivered: int = 0
    envelopes: EnvelopeReport = field(default_factory=EnvelopeReport)
    # The source of the first capture record from which on nothing was stored, when the
    # database could not be written (an outage, a full disk, read-only) and the ingest
    # stopped there; None when it read its input to the end.
    cut: str | None = None
    sink: Callable[[Verdict], None] | None = None
    _outcomes: Counter[str] = field(default_factory=Counter)
    _observations: deque[int | None] = field(default_factory=deque)  # beside ``verdicts``
    _where: dict[int, int] = field(default_factory=dict)  # observation -> absolute position
    _first: int = 0  # absolute position of verdicts[0]

    @property
    def complete(self) -> bool:
        """Whether every item read was stored (or refused with its verdict): nothing to
        send again. An item error (``errors``, ``envelopes.errors`` that were not stored)
        or a cut input makes it False."""
        if self.cut is not None or self.errors:
            return False
        return not any(isinstance(e, NotStored) for e in self.envelopes.errors)

    @property
    def counts(self) -> dict[str, int]:
        counts = {o.value: self._outcomes[o.value] for o in Outcome}
        counts.update(verdicts=self._first + len(self.verdicts), skipped=self.skipped)
        counts.update(errors=len(self.errors), stored=self.stored, **self.envelopes.counts)
        counts.update(redelivered=self.redelivered)
        return counts

    def add(self, verdict: Verdict, observation: int | None = None) -> None:
        if observation is not None:
            self._where[observation] = self._first + len(self.verdicts)
        self.verdicts.append(verdict)
        self._observations.append(observation)
        self._outcomes[verdict.outcome._value_] += 1
        if self.sink is not None and len(self.verdicts) > VERDICT_WINDOW:
            self._hand_on(len(self.verdicts) - VERDICT_WINDOW)

    def replace(self, observation: int, verdict: Verdict) -> None:
        """A verdict of this run judged again; ignored once it was handed on."""
        position = self._where.get(observation)
        if position is None:
            return
        old = self.verdicts[position - self._first]
        self._outcomes[old.outcome.value] -= 1
        self._outcomes[verdict.outcome.value] += 1
        self.verdicts[position - self._first] = verdict

    def finish(self) -> None:
        """Hand every remaining verdict to the sink (no-op without one)."""
        if self.sink is not None:
            self._hand_on(len(self.verdicts))

    def _hand_on(self, n: int) -> None:
        assert self.sink is not None
        for verdict in self.verdicts[:n]:
            self.sink(verdict)
            observation = self._observations.popleft()
            if observation is not None:
                del self._where[observation]
        del self.verdicts[:n]
        self._first += n
