"""Queries over 1,000,000 stored hops in PostgreSQL: hop lists, flag queue, dialog page data,
search by digest prefix (issue 5 targets: p50 < 100 ms, p99 < 300 ms).

Filling a store of a million hops through the ingest pipeline would take most of a day on
this machine (~50 elements/s on PostgreSQL, BENCHMARKS.md), so this script writes the rows
directly, with PostgreSQL ``COPY``, into the real schema (a fresh database on a throwaway
cluster, ``tests/pg.py``, its shared_buffers raised to ``--shared-buffers``, brought to head
by the Alembic migrations). The rows are shaped as ``app.store.derive`` and
``app.store.records`` write them for such traffic (flags are placed at random, not derived):

- dialogs of 1 to 60 hops (mean ~15) whose delegations form trees (each hop's offer names
  an earlier hop of its dialog as ``prev``: a ``link`` row), plus 10 dialogs of 500 hops and
  one of 2,000, among 200 agents, over 30 days;
- per hop an offer element and the statuses its state needs (accepted, completed, failed,
  rejected, canceled; expired and offered hops have none), one observation and one verdict
  per element, 5 % of elements received twice (a ``duplicate`` verdict);
- a state mix of 70 % completed, 6 % failed, 3 % rejected, 4 % canceled, 5 % expired,
  7 % accepted, 5 % offered (the last two with deadlines after the run, so the sweep every
  read starts with finds nothing to do, as on a store whose clock is current);
- flags on ~3 % of hops, of every kind with its severity, in every workflow status
  (open, acknowledged, snoozed, resolved); rejected-element flags come with their rejected
  element, observation and ``reject`` verdict, equivocations with their second offer.

Element octets: the first ``--signed`` hops (2,000 by default) are signed for real with the
toolkit (``handoff_context``, ES256 JWS, keys for the 200 agents) and their digests are
the real handoff digests; every other element's octets are synthetic base64url text of the
same length as the signed ones, and its digest is the SHA-256 of those octets, as for a
real element. Secondary indexes are dropped before the load and recreated from their own
definitions after it (then ``VACUUM ANALYZE``); foreign keys are not checked during the
load (``session_replication_role = replica``): the rows are consistent by construction.

The queries are the application's own functions (``app.store.queries``,
``app.store.dashboard``, ``app.web.charts.chain_graph``), each in a read-only transaction
exactly as the service opens them (``db.read_only``), with parameters drawn at random for
every run (states, agents, dialogs, time windows, pages, digest prefixes of stored
elements); the kinds of query are interleaved in random order. p50/p99 per kind, and for
each kind that misses a target the EXPLAIN ANALYZE of its slowest statement.

    .venv/bin/python bench/query_scale.py [--hops 1000000] [--runs 200] [--signed 2000]
                                          [--seed 1] [--shared-buffers 1GB] [--only QUERY ...]
                                          [--explain] [--quick]

Prints a table and writes bench/results/query_scale.json (``--quick``: 20,000 hops, 30 runs,
query_scale_quick.json). The cluster is stopped and removed on any exit, Ctrl-C included.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import re
import statistics
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import Any

import psycopg
from _support import interruptible, postgres, write_results
from handoff_context import (
    A2A_STATE,
    SEVERITY,
    FlagKind,
    HopState,
    Signer,
    Timing,
    b64url_encode,
    digest_text,
    handoff_digest,
    make_offer,
    make_status,
)
from sqlalchemy import event

from app.envelope.ledger import CaseRules
from app.ingest.sweep import sweep
from app.store import dashboard, db, queries
from app.web import charts
from tests import pg

P50_TARGET_MS = 100.0
P99_TARGET_MS = 300.0
DAY = 86_400
SPAN_DAYS = 30
AGENTS = 200
TRUST = "b" * 64  # the trust fingerprint every verdict was judged under

STATE_MIX = {
    "completed": 70,
    "failed": 6,
    "rejected": 3,
    "canceled": 4,
    "expired": 5,
    "accepted": 7,
    "offered": 5,
}
# The statuses a hop of each state carries, in signing order.
STATUSES = {
    "completed": ("accepted", "completed"),
    "failed": ("accepted", "failed"),
    "rejected": ("rejected",),
    "canceled": ("canceled",),
    "expired": (),
    "accepted": ("accepted",),
    "offered": (),
}
FLAG_RATE = 0.03
FLAG_MIX = {
    FlagKind.REJECTED_ELEMENT: 30,
    FlagKind.LOST_OUTCOME: 15,
    FlagKind.PARTIAL_FAILURE: 12,
    FlagKind.CANCEL_NOT_PROPAGATED: 10,
    FlagKind.STATUS_CONFLICT: 10,
    FlagKind.HOST_DIVERGENCE: 10,
    FlagKind.CANCEL_RACE: 6,
    FlagKind.EQUIVOCATION: 7,
}
FLAG_STATUS_MIX = {"open": 55, "acknowledged": 15, "snoozed": 10, "resolved": 20}
CARRIERS = ("a2a-1.0", "a2a-0.3", "mcp", "raw")
RETRANSMIT = 0.05

OFFER_CHECKS = json.dumps(
    [
        {"check": c, "result": "pass"}
        for c in ("signature", "audience", "freshness", "replay", "dialog", "chain", "refs")
    ]
)
STATUS_CHECKS = json.dumps(
    [{"check": c, "result": "pass"} for c in ("signature", "offer", "parties")]
)
BAD_CHECKS = json.dumps(
    [{"check": "signature", "result": "fail", "reason": "bad-signature"}]
    + [{"check": c, "result": "not-run"} for c in ("audience", "freshness", "replay")]
)

COLUMNS = {
    "element": "digest form type octets iss aud hop hop_iss dialog task iat exp offer state "
    "reason ref_count content first_seen",
    "observation": "id digest received_at received_by source carrier role dialog task_id "
    "task_state via ingested_at",
    "verdict": "id observation_id digest element outcome reason detail checks chain "
    "equivocation_first equivocation_variant trust remembered valid fault judged_at",
    "hop": "iss hop offer aud dialog task iat exp state a2a_state accepted_at terminal_at "
    "deadline derived_at",
    "link": "offer prev dialog",
    "flag": "id key kind variant severity status assignee snoozed_until note evidence iss hop "
    "offer opened_at detail updated_at",
}


# --- COPY text format ---------------------------------------------------------------------

NULL = "\\N"


def bx(value: bytes | None) -> str:
    """A bytea in COPY text format (the backslash of ``\\x`` escaped)."""
    return NULL if value is None else "\\\\x" + value.hex()


def tx(value: object) -> str:
    return NULL if value is None else str(value)


class Copier:
    """One ``COPY table FROM STDIN`` per table, each on its own connection, all open for
    the whole load; rows are buffered as text lines and written in ~4 MB pieces."""

    def __init__(self, url: str, stack: ExitStack) -> None:
        self.streams: dict[str, Any] = {}
        self.buffers: dict[str, list[str]] = {}
        self.sizes: dict[str, int] = {}
        self.rows: Counter[str] = Counter()
        for table, columns in COLUMNS.items():
            conn = stack.enter_context(psycopg.connect(url))
            conn.execute("SET session_replication_role = replica")  # no FK triggers
            cursor = stack.enter_context(conn.cursor())
            names = ", ".join(columns.split())
            self.streams[table] = stack.enter_context(
                cursor.copy(f"COPY {table} ({names}) FROM STDIN")  # type: ignore[arg-type]
            )
            self.buffers[table] = []
            self.sizes[table] = 0

    def add(self, table: str, *fields: str) -> None:
        line = "\t".join(fields)
        self.buffers[table].append(line)
        self.sizes[table] += len(line)
        self.rows[table] += 1
        if self.sizes[table] > 4_000_000:
            self.flush(table)

    def flush(self, table: str) -> None:
        if self.buffers[table]:
            self.streams[table].write(("\n".join(self.buffers[table]) + "\n").encode())
            self.buffers[table] = []
            self.sizes[table] = 0

    def close(self) -> None:
        for table in self.streams:
            self.flush(table)


# --- the synthetic traffic ----------------------------------------------------------------


@dataclass
class Hop:
    iss: str
    aud: str
    hop: str
    dialog: str
    task: str
    iat: int
    exp: int
    state: str
    offer: bytes = b""
    octets: bytes = b""  # real offers only: the statuses sign over them
    statuses: list[tuple[bytes, str, int]] = field(default_factory=list)  # digest, state, iat


@dataclass
class Loaded:
    """What the queries draw their random parameters from."""

    now: int
    start: int
    agents: list[str]
    dialogs: list[str]
    big_dialogs: list[str]
    digests: list[bytes]  # a sample of stored element digests
    flags: int
    counts: dict[str, int]
    states: Counter[str]
    flag_kinds: Counter[str]
    seconds: float
    octet_sizes: dict[str, float]


class Generator:
    def __init__(self, args: argparse.Namespace, now: int) -> None:
        self.rng = random.Random(f"query-scale:{args.seed}")
        self.now = now
        self.start = now - SPAN_DAYS * DAY - 3600
        self.signed_left = args.signed
        orgs = [f"org-{i:02d}.example" for i in range(12)]
        roles = ("assistant", "planner", "coder", "tester", "reviewer", "retriever")
        self.agents = [
            f"spiffe://{orgs[i % len(orgs)]}/agent/{roles[i % len(roles)]}-{i:03d}"
            for i in range(AGENTS)
        ]
        self.signers: dict[str, Signer] = {}
        if args.signed:
            self.signers = {a: Signer.generate(a, kid=f"k{n}") for n, a in enumerate(self.agents)}
        self.pool = b64url_encode(self.rng.randbytes(1 << 20)).encode()
        self.sizes: dict[str, list[int]] = {"offer": [], "status": []}
        self.counter = 0
        self.observation_id = 0
        self.flag_id = 0
        self.digests: list[bytes] = []
        self.states: Counter[str] = Counter()
        self.flag_kinds: Counter[str] = Counter()

    # identifiers and octets

    def token(self, bits: int = 128) -> str:
        return b64url_encode(self.rng.getrandbits(bits).to_bytes(bits // 8, "big"))

    def synthetic(self, kind: str) -> bytes:
        """Base64url text as long as a signed element of this kind, unique per element."""
        sizes = self.sizes[kind]
        mean = statistics.fmean(sizes) if sizes else (560 if kind == "offer" else 470)
        length = max(64, int(self.rng.gauss(mean, mean * 0.08)))
        self.counter += 1
        head = f"eyJ{self.counter:010d}.".encode()
        at = self.rng.randrange(0, len(self.pool) - length)
        return head + self.pool[at : at + length - len(head)]

    def keep(self, digest: bytes) -> None:
        if len(self.digests) < 20_000:
            self.digests.append(digest)
        elif self.rng.random() < 0.01:
            self.digests[self.rng.randrange(len(self.digests))] = digest

    # one dialog

    def dialog_sizes(self, hops: int) -> Iterator[tuple[str, int, bool]]:
        big = [2000] + [500] * 10 if hops >= 50_000 else [min(200, hops // 10)]
        left = hops - sum(big)
        index = 0
        for size in big:
            yield f"ctx-{index:07d}-{self.rng.getrandbits(32):08x}", size, True
            index += 1
        while left > 0:
            size = min(left, max(1, min(60, int(self.rng.expovariate(1 / 15)) + 1)))
            left -= size
            yield f"ctx-{index:07d}-{self.rng.getrandbits(32):08x}", size, False
            index += 1

    def dialog(self, name: str, size: int, out: Copier) -> None:
        begin = self.rng.randrange(self.start, self.now - 3600 - size * 30)
        hops: list[Hop] = []
        for j in range(size):
            parent = hops[self.rng.randrange(j)] if j else None
            iss = parent.aud if parent else self.agents[self.rng.randrange(0, AGENTS, 6)]
            aud = self.rng.choice(self.agents)
            while aud == iss:
                aud = self.rng.choice(self.agents)
            iat = begin + j * self.rng.randint(1, 30)
            state = self.rng.choices(list(STATE_MIX), weights=list(STATE_MIX.values()))[0]
            if state in ("offered", "accepted"):
                exp = self.now + DAY + self.rng.randrange(3600)  # a long task, still running
            else:
                exp = iat + self.rng.choice((120, 600, 3600))
            hop = Hop(iss, aud, self.token(), name, f"task-{self.token(64)}", iat, exp, state)
            self.offer(hop, parent, out)
            hops.append(hop)
            self.states[state] += 1
            if self.rng.random() < FLAG_RATE:
                self.flag(hop, out)

    def offer(self, hop: Hop, parent: Hop | None, out: Copier) -> None:
        real = self.signed_left > 0
        if real:
            self.signed_left -= 1
            hop.octets = make_offer(
                self.signers[hop.iss],
                aud=hop.aud,
                dialog=hop.dialog,
                iat=hop.iat,
                exp=hop.exp,
                hop=hop.hop,
                task=hop.task,
                prev=parent.offer if parent else None,
            )
            self.sizes["offer"].append(len(hop.octets))
            octets = hop.octets
        else:
            octets = self.synthetic("offer")
        hop.offer = handoff_digest(octets)
        self.element(hop, octets, "offer", hop.iss, hop.aud, hop.iat, None, None, out)
        self.receipts(hop, hop.offer, "offer", hop.aud, hop.iat, out, chain=parent is not None)
        if parent is not None:
            out.add("link", bx(hop.offer), bx(parent.offer), hop.dialog)
        at = hop.iat
        accepted_at = terminal_at = None
        for state in STATUSES[hop.state]:
            at += self.rng.randint(1, 600)
            iss, aud = (hop.iss, hop.aud) if state == "canceled" else (hop.aud, hop.iss)
            if real:
                octets = make_status(
                    self.signers[iss], offer_octets=hop.octets, state=state, iat=at
                )
                self.sizes["status"].append(len(octets))
            else:
                octets = self.synthetic("status")
            digest = handoff_digest(octets)
            hop.statuses.append((digest, state, at))
            self.element(hop, octets, "status", iss, aud, at, hop.offer, state, out)
            self.receipts(hop, digest, "status", aud, at, out)
            if state == "accepted":
                accepted_at = at
            else:
                terminal_at = at
        if hop.state == "expired":
            terminal_at = hop.exp
        deadline = hop.exp + 60 if hop.state in ("offered", "accepted") else None
        out.add(
            "hop",
            hop.iss,
            hop.hop,
            bx(hop.offer),
            hop.aud,
            hop.dialog,
            hop.task,
            str(hop.iat),
            str(hop.exp),
            hop.state,
            tx(A2A_STATE[HopState(hop.state)]),
            tx(accepted_at),
            tx(terminal_at),
            tx(deadline),
            str(self.now - 3600),
        )

    def element(
        self,
        hop: Hop,
        octets: bytes,
        kind: str,
        iss: str,
        aud: str,
        iat: int,
        offer: bytes | None,
        state: str | None,
        out: Copier,
    ) -> None:
        digest = handoff_digest(octets)
        content = hashlib.sha256(b"content:" + octets[:-40]).digest()
        self.keep(digest)
        out.add(
            "element",
            bx(digest),
            "jws",
            kind,
            bx(octets),
            iss,
            aud,
            hop.hop,
            hop.iss,
            hop.dialog,
            hop.task if kind == "offer" else NULL,
            str(iat),
            str(hop.exp) if kind == "offer" else NULL,
            bx(offer),
            tx(state),
            "partial results kept" if state == "failed" else NULL,
            "0",
            bx(content),
            str(iat + 1),
        )

    def receipts(
        self,
        hop: Hop,
        digest: bytes,
        kind: str,
        received_by: str,
        at: int,
        out: Copier,
        *,
        chain: bool = False,
        outcome: str = "accept",
    ) -> None:
        """One observation and its verdict; a retransmission now and then."""
        times = 2 if self.rng.random() < RETRANSMIT else 1
        carrier = self.rng.choice(CARRIERS)
        for n in range(times):
            self.observation_id += 1
            received = at + self.rng.randint(0, 2) + n * self.rng.randint(1, 120)
            out.add(
                "observation",
                str(self.observation_id),
                bx(digest),
                str(received),
                received_by,
                f"http:ingest/{carrier}",
                carrier,
                "message",
                hop.dialog,
                hop.task,
                NULL,
                NULL,
                str(received + 1),
            )
            verdict = outcome if n == 0 else "duplicate"
            bad = outcome == "reject"
            checks = BAD_CHECKS if bad else OFFER_CHECKS if kind == "offer" else STATUS_CHECKS
            chain_doc = '{"length": 1, "elements": []}' if chain and kind == "offer" else NULL
            out.add(
                "verdict",
                str(self.observation_id),
                str(self.observation_id),
                bx(digest),
                kind,
                verdict,
                "bad-signature" if bad else NULL,
                "signature does not verify" if bad else NULL,
                checks,
                chain_doc,
                NULL,
                NULL,
                TRUST,
                "f" if bad else "t",
                "f" if bad else "t",
                "bad-signature" if bad else NULL,
                str(received + 1),
            )

    def flag(self, hop: Hop, out: Copier) -> None:
        kind = self.rng.choices(list(FLAG_MIX), weights=list(FLAG_MIX.values()))[0]
        evidence = [hop.offer, *(d for d, _, _ in hop.statuses)]
        variant = None
        opened = (hop.statuses[-1][2] if hop.statuses else hop.iat) + self.rng.randint(1, 3600)
        if kind is FlagKind.REJECTED_ELEMENT:
            variant = "bad-signature"
            octets = self.synthetic("status")
            digest = handoff_digest(octets)
            at = hop.iat + self.rng.randint(1, 900)
            self.element(hop, octets, "status", hop.aud, hop.iss, at, hop.offer, "completed", out)
            self.receipts(hop, digest, "status", hop.iss, at, out, outcome="reject")
            evidence, opened = [digest], at + 1
        elif kind is FlagKind.EQUIVOCATION:
            variant = self.rng.choice(("content", "signature-only"))
            octets = self.synthetic("offer")
            digest = handoff_digest(octets)
            at = hop.iat + self.rng.randint(1, 900)
            self.element(hop, octets, "offer", hop.iss, hop.aud, hop.iat, None, None, out)
            self.receipts(hop, digest, "offer", hop.aud, at, out)
            evidence, opened = sorted([hop.offer, digest]), at + 1
        status = self.rng.choices(list(FLAG_STATUS_MIX), weights=list(FLAG_STATUS_MIX.values()))[0]
        snoozed = None
        if status == "snoozed":  # half of the snoozes have run out by now
            snoozed = self.now + self.rng.choice((-1, 1)) * self.rng.randint(60, 7 * DAY)
        assignee = self.rng.choice((None, None, "alice", "bob", "carol"))
        canon = json.dumps([kind.value, hop.iss, hop.hop, variant], separators=(",", ":"))
        self.flag_id += 1
        self.flag_kinds[kind.value] += 1
        out.add(
            "flag",
            str(self.flag_id),
            hashlib.sha256(canon.encode()).hexdigest(),
            kind.value,
            tx(variant),
            SEVERITY[kind].value,
            status,
            tx(assignee),
            tx(snoozed),
            NULL,
            json.dumps([digest_text(d) for d in evidence]),
            hop.iss,
            hop.hop,
            bx(hop.offer),
            str(opened),
            f"{kind.value} on {hop.hop}",
            str(opened),
        )


# --- the load -----------------------------------------------------------------------------


def secondary_indexes(conn: psycopg.Connection) -> list[tuple[str, str]]:
    """(name, definition) of every index not backing a constraint (PK, UNIQUE)."""
    rows = conn.execute(
        """
        SELECT i.indexname, i.indexdef FROM pg_indexes i
        WHERE i.schemaname = 'public'
          AND NOT EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conname = i.indexname)
        """
    ).fetchall()
    return [(name, definition) for name, definition in rows]


def load(url: str, args: argparse.Namespace, now: int) -> Loaded:
    t0 = time.perf_counter()
    gen = Generator(args, now)
    with psycopg.connect(url, autocommit=True) as conn:
        indexes = secondary_indexes(conn)
        for name, _ in indexes:
            conn.execute(f'DROP INDEX "{name}"')  # type: ignore[arg-type]
    dialogs: list[str] = []
    big: list[str] = []
    with ExitStack() as stack:
        out = Copier(url, stack)
        for name, size, is_big in gen.dialog_sizes(args.hops):
            gen.dialog(name, size, out)
            (big if is_big else dialogs).append(name)
            if len(dialogs) % 5000 == 0 and not is_big:
                print(f"  {sum(gen.states.values()):,} hops ...", file=sys.stderr)
        out.close()
        rows = dict(out.rows)
    print(f"  rows copied in {time.perf_counter() - t0:.0f} s: {rows}", file=sys.stderr)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SET maintenance_work_mem = '512MB'")
        for _, definition in indexes:
            conn.execute(definition)  # type: ignore[arg-type]
        for table, column in (("observation", "id"), ("verdict", "id"), ("flag", "id")):
            conn.execute(
                f"SELECT setval(pg_get_serial_sequence('{table}', '{column}'), "  # type: ignore[arg-type]
                f"(SELECT max({column}) FROM {table}))"
            )
        conn.execute("VACUUM ANALYZE")
    seconds = time.perf_counter() - t0
    sizes = {k: round(statistics.fmean(v), 1) for k, v in gen.sizes.items() if v}
    return Loaded(
        now=now,
        start=gen.start,
        agents=gen.agents,
        dialogs=dialogs,
        big_dialogs=big,
        digests=gen.digests,
        flags=gen.flag_id,
        counts=rows,
        states=gen.states,
        flag_kinds=gen.flag_kinds,
        seconds=seconds,
        octet_sizes=sizes,
    )


# --- the queries --------------------------------------------------------------------------

Query = Callable[[Any, random.Random, Loaded], int]  # returns the rows it found


def _hops_state(s: Any, rng: random.Random, d: Loaded) -> int:
    state = rng.choice(list(STATE_MIX))
    return len(queries.list_hops(s, state=state, limit=101))


def _hops_state_next_page(s: Any, rng: random.Random, d: Loaded) -> int:
    state = rng.choice(list(STATE_MIX))
    after = (rng.randrange(d.start, d.now - DAY), "", "")
    return len(queries.list_hops(s, state=state, after=after, limit=101))


def _hops_agent(s: Any, rng: random.Random, d: Loaded) -> int:
    return len(queries.list_hops(s, agent=rng.choice(d.agents), limit=101))


def _hops_dialog(s: Any, rng: random.Random, d: Loaded) -> int:
    return len(queries.list_hops(s, dialog=rng.choice(d.dialogs), limit=101))


def _hops_time(s: Any, rng: random.Random, d: Loaded) -> int:
    since = rng.randrange(d.start, d.now - DAY)
    return len(queries.list_hops(s, since=since, until=since + 3600, limit=101))


def _hops_combined(s: Any, rng: random.Random, d: Loaded) -> int:
    since = rng.randrange(d.start, d.now - 7 * DAY)
    found = queries.list_hops(
        s,
        state=rng.choice(("completed", "failed", "canceled")),
        agent=rng.choice(d.agents),
        since=since,
        until=since + 7 * DAY,
        limit=101,
    )
    return len(found)


def _hops_flagged(s: Any, rng: random.Random, d: Loaded) -> int:
    return len(queries.list_hops(s, flag=rng.choice(list(FLAG_MIX)).value, limit=101))


def _hops_page(s: Any, rng: random.Random, d: Loaded) -> int:
    """The dashboard's /hops page: a state filter, a page of 50, and the total."""
    states = rng.choice([("completed",), ("failed",), dashboard.UNRESOLVED, ()])
    found, _ = dashboard.find_hops(s, states=states, offset=50 * rng.randrange(20), limit=50)
    return len(found)


def _hops_page_agent(s: Any, rng: random.Random, d: Loaded) -> int:
    found, _ = dashboard.find_hops(s, agent=rng.choice(d.agents), offset=0, limit=50)
    return len(found)


def _flags_open(s: Any, rng: random.Random, d: Loaded) -> int:
    """The API's flag queue: open flags in id order, a page of 100 from a random place."""
    after = rng.randrange(d.flags) if rng.random() < 0.5 else None
    return len(queries.list_flags(s, now=d.now, status="open", after=after, limit=101))


def _triage_open(s: Any, rng: random.Random, d: Loaded) -> int:
    """The dashboard's triage queue: open, severity first then oldest, a page of 50, and
    the total."""
    open_only = dashboard.TriageFilter(status="open")
    found, _ = dashboard.triage(s, now=d.now, filters=open_only, offset=50 * rng.randrange(10))
    return len(found)


def _triage_severity(s: Any, rng: random.Random, d: Loaded) -> int:
    severity = rng.choice(("critical", "high", "medium", "low"))
    order = dashboard.Order.OLDEST if rng.random() < 0.5 else dashboard.Order.NEWEST
    chosen = dashboard.TriageFilter(status="open", severities=(severity,))
    found, _ = dashboard.triage(s, now=d.now, filters=chosen, order=order)
    return len(found)


def _dialog_page(s: Any, rng: random.Random, d: Loaded) -> int:
    """What GET /dialogs/{dialog} reads: the tree, its page of nodes, their statuses."""
    return _dialog_data(s, rng.choice(d.dialogs))


def _dialog_page_big(s: Any, rng: random.Random, d: Loaded) -> int:
    return _dialog_data(s, rng.choice(d.big_dialogs))


def _dialog_data(s: Any, dialog: str) -> int:
    nodes = queries.dialog_tree(s, dialog=dialog)
    graph = charts.chain_graph(nodes, trusted=set(), page=1)
    statuses = dashboard.statuses_of(s, offers=[n.hop.hop.offer for n in graph.ordered])
    return len(nodes) + sum(len(v) for v in statuses.values())


def _dialogs_list(s: Any, rng: random.Random, d: Loaded) -> int:
    """GET /dialogs: a page of 50 dialogs after a random one, with their state counts."""
    found = queries.list_dialogs(s, after=rng.choice(d.dialogs), limit=51)
    dashboard.dialog_states(s, dialogs=[x.dialog for x in found[:50]])
    return len(found)


def _search_prefix(s: Any, rng: random.Random, d: Loaded) -> int:
    """GET /search?q=<8 characters of a stored digest>: everything search() looks for."""
    text = digest_text(rng.choice(d.digests))[: rng.choice((6, 8, 10))]
    return len(dashboard.search(s, text=text).elements)


def _search_exact(s: Any, rng: random.Random, d: Loaded) -> int:
    """A whole digest pasted into search: the hop of that offer, or the element."""
    digest = rng.choice(d.digests)
    found = queries.hop_for_offer(s, offer=digest)
    return 1 if found is not None or queries.get_element(s, digest=digest) else 0


def _sweep(s: Any, rng: random.Random, d: Loaded) -> int:
    """What every read starts with (``Service.sweep``): nothing is due on a current store."""
    return sweep(s, now=d.now, timing=Timing(), cases=CaseRules())


QUERIES: dict[str, tuple[str, Query]] = {
    "hops_state": ("hop list, state filter, first page of 100 (API)", _hops_state),
    "hops_state_after": ("hop list, state filter, page after a random time", _hops_state_next_page),
    "hops_agent": ("hop list, agent filter (iss or aud)", _hops_agent),
    "hops_dialog": ("hop list, dialog filter", _hops_dialog),
    "hops_time": ("hop list, one hour of offer iat", _hops_time),
    "hops_combined": ("hop list, state + agent + 7 days", _hops_combined),
    "hops_flag": ("hop list, hops with an unresolved flag of a kind", _hops_flagged),
    "hops_page": ("/hops page: state filter, page of 50, total", _hops_page),
    "hops_page_agent": ("/hops page: agent filter, page of 50, total", _hops_page_agent),
    "flags_open": ("flag queue, open, page of 100 (API)", _flags_open),
    "triage_open": ("triage queue, open, oldest first, page of 50, total", _triage_open),
    "triage_severity": ("triage queue, open, by severity, total", _triage_severity),
    "dialog_page": ("dialog page data (tree, page of nodes, statuses)", _dialog_page),
    "dialog_page_big": ("dialog page data, 500 or 2,000-hop dialogs", _dialog_page_big),
    "dialogs_list": ("/dialogs page: 50 dialogs with state counts", _dialogs_list),
    "search_prefix": ("search, digest prefix of 6 to 10 characters", _search_prefix),
    "search_exact": ("search, a whole digest", _search_exact),
    "sweep": ("sweep with nothing due (before every read)", _sweep),
}


@contextmanager
def reading(engine: Any) -> Iterator[Any]:
    with db.transaction(db.read_only(engine)) as session:
        yield session


def measure(url: str, data: Loaded, runs: int, seed: int, only: list[str]) -> list[dict]:
    engine = db.make_engine(url)
    try:
        rng = random.Random(f"query-scale-runs:{seed}")
        names = [n for n in QUERIES if not only or n in only]
        for name in names:  # warm-up: statement compiling, the connection pool
            with reading(engine) as s:
                QUERIES[name][1](s, rng, data)
        plan = [name for name in names for _ in range(runs)]
        rng.shuffle(plan)
        times: dict[str, list[float]] = {n: [] for n in names}
        found: dict[str, int] = Counter()
        for name in plan:
            t = time.perf_counter()
            with reading(engine) as s:
                found[name] += QUERIES[name][1](s, rng, data)
            times[name].append((time.perf_counter() - t) * 1000)
    finally:
        engine.dispose()
    rows = []
    for name in names:
        ms = sorted(times[name])
        p50 = statistics.median(ms)
        p99 = ms[min(len(ms) - 1, int(0.99 * len(ms)))]
        met = p50 < P50_TARGET_MS and p99 < P99_TARGET_MS
        rows.append(
            {
                "query": name,
                "what": QUERIES[name][0],
                "runs": len(ms),
                "p50_ms": round(p50, 1),
                "p90_ms": round(ms[int(0.9 * len(ms))], 1),
                "p99_ms": round(p99, 1),
                "max_ms": round(ms[-1], 1),
                "mean_rows": round(found[name] / len(ms), 1),
                "target": "met" if met else "missed",
            }
        )
    return rows


def explain(url: str, data: Loaded, names: list[str], seed: int) -> dict[str, dict]:
    """For each kind of query: run it once, and ``EXPLAIN (ANALYZE, BUFFERS)`` its slowest
    SQL statement with the same parameters: where the time of a miss goes."""
    engine = db.make_engine(url)
    statements: list[tuple[float, str, Any]] = []

    def before(conn: Any, _cursor: Any, _sql: str, _params: Any, _ctx: Any, _many: bool) -> None:
        conn.info["started"] = time.perf_counter()

    def after(conn: Any, _cursor: Any, sql: str, params: Any, _ctx: Any, _many: bool) -> None:
        statements.append((time.perf_counter() - conn.info["started"], sql, params))

    plans: dict[str, dict] = {}
    rng = random.Random(f"query-scale-explain:{seed}")
    try:
        for name in names:
            statements.clear()
            event.listen(engine, "before_cursor_execute", before)
            event.listen(engine, "after_cursor_execute", after)
            try:
                with reading(engine) as s:
                    QUERIES[name][1](s, rng, data)
            finally:
                event.remove(engine, "before_cursor_execute", before)
                event.remove(engine, "after_cursor_execute", after)
            took, sql, params = max(statements, key=lambda x: x[0])
            with engine.connect() as conn:
                lines = conn.exec_driver_sql("EXPLAIN (ANALYZE, BUFFERS) " + sql, params)
                plan = [row[0] for row in lines]
            plans[name] = {
                "statement_ms": round(took * 1000, 1),
                "sql": sql if len(sql) < 1500 else sql[:1500] + " ...",
                "plan": [line[:300] for line in plan[:60]],  # long IN lists: a few lines
                "plan_lines": len(plan),
            }
    finally:
        engine.dispose()
    return plans


def set_shared_buffers(cluster: pg.Cluster, size: str) -> None:
    """The test cluster runs with PostgreSQL's default 128 MB of shared buffers, a tenth of
    this store; a server holding a million hops would be given more (the usual advice is
    a quarter of RAM). Set it and restart (pg_ctl keeps the other options)."""
    if not re.fullmatch(r"\d+(kB|MB|GB)", size):
        raise SystemExit(f"--shared-buffers {size!r}: a size such as 1GB or 512MB")
    with psycopg.connect(
        host="127.0.0.1", port=cluster.port, user="postgres", dbname="postgres", autocommit=True
    ) as conn:
        conn.execute(f"ALTER SYSTEM SET shared_buffers = '{size}'")  # type: ignore[arg-type]
    restart = [
        str(cluster.bin / "pg_ctl"),
        "-D",
        str(cluster.data),
        "-l",
        str(cluster.root / "log"),
    ]
    done = subprocess.run(
        pg._as_postgres([*restart, "-w", "-m", "fast", "restart"]),
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"pg_ctl restart failed: {done.stderr.strip()[-500:]}")


def table_sizes(url: str) -> dict[str, str]:
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT relname, pg_size_pretty(pg_total_relation_size(oid)) FROM pg_class "
            "WHERE relkind = 'r' AND relnamespace = 'public'::regnamespace ORDER BY 1"
        ).fetchall()
        total = conn.execute("SELECT pg_size_pretty(pg_database_size(current_database()))")
        return {**dict(rows), "(database)": total.fetchone()[0]}  # type: ignore[index]


def print_table(rows: list[dict]) -> None:
    print(
        f"{'query':18} {'runs':>5} {'p50 ms':>8} {'p90 ms':>8} {'p99 ms':>8} {'max ms':>8}  target"
    )
    for r in rows:
        print(
            f"{r['query']:18} {r['runs']:>5} {r['p50_ms']:>8.1f} {r['p90_ms']:>8.1f} "
            f"{r['p99_ms']:>8.1f} {r['max_ms']:>8.1f}  {r['target']}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--hops", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=200, help="timed runs per kind of query")
    parser.add_argument("--signed", type=int, default=2000, help="hops signed for real")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--shared-buffers", default="1GB", help="PostgreSQL shared_buffers ('' keeps 128MB)"
    )
    parser.add_argument("--only", nargs="*", default=[], choices=list(QUERIES), metavar="QUERY")
    parser.add_argument("--quick", action="store_true", help="20,000 hops, 30 runs")
    parser.add_argument(
        "--explain", action="store_true", help="EXPLAIN ANALYZE every kind (default: misses)"
    )
    args = parser.parse_args()
    if args.quick:
        args.hops, args.runs = 20_000, 30
    if args.hops < 1000 or args.runs < 1 or args.signed < 0:
        parser.error("--hops must be at least 1000, --runs positive, --signed not negative")

    with interruptible(), postgres() as cluster:
        if args.shared_buffers:
            set_shared_buffers(cluster, args.shared_buffers)
        url = cluster.create_database("scale")
        engine = db.make_engine(url)
        try:
            db.upgrade(engine)
            revision = db.current_revision(engine)
        finally:
            engine.dispose()
        plain = url.replace("postgresql+psycopg://", "postgresql://")
        now = int(time.time())
        print(f"loading {args.hops:,} hops (schema {revision}) ...", file=sys.stderr)
        data = load(plain, args, now)
        print(f"loaded in {data.seconds:.0f} s", file=sys.stderr)
        sizes = table_sizes(plain)
        rows = measure(url, data, args.runs, args.seed, args.only)
        missed = [r["query"] for r in rows if r["target"] == "missed" or args.explain]
        plans = explain(url, data, missed, args.seed) if missed else {}
    for name, found in plans.items():
        print(f"\n{name}: slowest statement {found['statement_ms']} ms\n{found['sql']}")
        print("\n".join(found["plan"]))
        print(f"{found['plan_lines']} lines of plan in all")
    print_table(rows)
    doc = {
        "params": vars(args),
        "schema_revision": revision,
        "load_seconds": round(data.seconds, 1),
        "shared_buffers": args.shared_buffers or "128MB",
        "load_average_at_end": os.getloadavg()[0],
        "rows": data.counts,
        "hop_states": dict(data.states),
        "flag_kinds": dict(data.flag_kinds),
        "signed_octet_sizes": data.octet_sizes,
        "table_sizes": sizes,
        "dialogs": len(data.dialogs) + len(data.big_dialogs),
        "targets": {"p50_ms": P50_TARGET_MS, "p99_ms": P99_TARGET_MS},
        "results": rows,
        "plans": plans,
    }
    path = write_results("query_scale_quick" if args.quick else "query_scale", doc)
    print(f"written {path}", file=sys.stderr)


if __name__ == "__main__":
    main()
