"""Host task states (profile §8: the host keeps its own task state beside the hop's) and the
observation ids that make a shipper's retry harmless.

Every captured A2A Task or status update with a task id and a state is a ``HostStateRow``,
whether or not it carried a handoff element; a hop reads those of the tasks its own
observations name (and its offer's ``task``). They are kept in their own table because most
of them carry no element to hang an observation on (a delegate that cancels without
echoing a signed ``canceled`` still says CANCELED).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from handoff_context import HostObservation
from sqlalchemy import bindparam, select, union
from sqlmodel import Session

from app.store.db import insert_many, select_rows
from app.store.models import ElementRow, HostStateRow, ObservationRow, VerdictRow


def add_host_states(session: Session, rows: Sequence[dict[str, Any]]) -> None:
    """Insert host task state rows (alike, as ``host_values`` builds them) in one
    executemany, through the driver (``insert_many``): HTTP ingest stores a request's
    states once per request."""
    insert_many(session, HostStateRow, rows)


_KNOWN_OBSERVATIONS = select(ObservationRow.observation_key).where(
    ObservationRow.observation_key.in_(bindparam("b_keys", expanding=True))
)
_KNOWN_HOST = select(HostStateRow.observation_key).where(
    HostStateRow.observation_key.in_(bindparam("b_keys", expanding=True))
)


def stored_keys(session: Session, keys: Collection[str]) -> set[str]:
    """Which of these observation ids are stored already (a shipper's retry)."""
    if not keys:
        return set()
    params = {"b_keys": list(keys)}
    found = {key for (key,) in select_rows(session, _KNOWN_OBSERVATIONS, params)}
    return found | {key for (key,) in select_rows(session, _KNOWN_HOST, params)}


_TASK_HOPS = union(
    select(ElementRow.hop_iss, ElementRow.hop)
    .join(ObservationRow, ObservationRow.digest == ElementRow.digest)
    .where(ObservationRow.task_id.in_(bindparam("b_tasks", expanding=True))),
    select(ElementRow.hop_iss, ElementRow.hop).where(
        ElementRow.type == "offer", ElementRow.task.in_(bindparam("b_tasks", expanding=True))
    ),
)


def hops_of_tasks(session: Session, task_ids: Iterable[str]) -> set[tuple[str, str]]:
    """The hops whose elements were observed in (or whose offer names) one of these tasks."""
    tasks = sorted(set(task_ids))
    if not tasks:
        return set()
    return {(iss, hop) for iss, hop in select_rows(session, _TASK_HOPS, {"b_tasks": tasks})}


# The tasks each element was observed in (or that its offer names), and every captured
# state of those tasks: one query for all the elements of a chunk of hops (app.store.derive).
# An observation whose element was refused (a replay of an expired offer in a task of the
# replayer's own, say) ties no task to the hop: that task's states are not the hop's, and a
# careful receiver does not let someone else's replay raise a flag on a legitimate hop.
_IN_DIGESTS = bindparam("b_digests", expanding=True)
_ELEMENT_TASKS = union(
    select(ObservationRow.digest, ObservationRow.task_id.label("task"))
    .join(VerdictRow, VerdictRow.observation_id == ObservationRow.id)
    .where(
        ObservationRow.digest.in_(_IN_DIGESTS),
        ObservationRow.task_id.is_not(None),
        VerdictRow.outcome != "reject",
    ),
    select(ElementRow.digest, ElementRow.task.label("task")).where(
        ElementRow.digest.in_(_IN_DIGESTS), ElementRow.task.is_not(None)
    ),
).subquery()
_HOST_MANY = select(
    _ELEMENT_TASKS.c.digest,
    HostStateRow.id,
    HostStateRow.task_state,
    HostStateRow.received_at,
    HostStateRow.received_exact,
    HostStateRow.seq,
).join(HostStateRow, HostStateRow.task_id == _ELEMENT_TASKS.c.task)


@dataclass(frozen=True, slots=True)
class HostFact:
    """One stored host task state, by its row id (one state may be in the tasks of several
    of a hop's elements, and counts once)."""

    id: int
    observation: HostObservation


def host_facts(session: Session, digests: Sequence[bytes]) -> dict[bytes, list[HostFact]]:
    """Every captured state of the tasks these elements were observed in (or their offer
    names), by element, with the order key ``derive_hop`` judges them by: receive time,
    position in its stream, arrival. One query, whatever the number of elements."""
    found: dict[bytes, list[HostFact]] = {}
    if not digests:
        return found
    rows = select_rows(session, _HOST_MANY, {"b_digests": list(set(digests))})
    for digest, id_, task_state, received_at, received_exact, seq in rows:
        exact = received_exact if received_exact is not None else float(received_at)
        fact = HostFact(id_, HostObservation(task_state, exact, order=(seq, id_)))
        found.setdefault(digest, []).append(fact)
    return found


def host_of(
    facts: Mapping[bytes, Sequence[HostFact]], digests: Iterable[bytes]
) -> list[HostObservation]:
    """The host task states of one hop's elements, each once, in arrival order."""
    unique = {f.id: f.observation for d in digests for f in facts.get(d, ())}
    return [unique[i] for i in sorted(unique)]
