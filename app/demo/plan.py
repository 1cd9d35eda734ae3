"""Dialog plans: who delegates to whom (a tree of hops), how each hop ends, where faults go.

A plan is decided before anything is signed, so the simulation can honour what each fault
needs (a canceled hop whose subtree is still working, a leaf that never reports, ...) and so
that no fault leaks into another: a canceled subtree holds no other fault, a hop whose
outcome is disputed has no children, rejected offers have no statuses and no children.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from app.demo.agents import WORKER_ROLES, Agent, Cast

MAX_DEPTH = 5  # hops from the assistant in clean traffic; chains stay far below 16


class Fate(StrEnum):
    """How a hop ends. The first four are clean traffic."""

    COMPLETE = "complete"
    FAIL = "fail"  # failed, nothing took effect (no refs)
    REJECT = "reject"  # the delegate refuses (reason policy); no children
    SILENT = "silent"  # the delegate never answers; the offer expires
    PARTIAL = "partial"  # fault partial-failure: failed, with refs of what took effect
    LOST = "lost"  # fault lost-outcome: accepted, then nothing
    CONFLICT = "conflict"  # fault status-conflict
    RACE = "race"  # fault cancel-race
    CANCEL = "cancel"  # the delegator cancels; propagated below in time (clean)
    NOPROP = "noprop"  # fault cancel-not-propagated
    CANCELED = "canceled"  # canceled from above by propagation


CLEAN = frozenset({Fate.COMPLETE, Fate.FAIL, Fate.REJECT, Fate.SILENT})
WORKING = frozenset({Fate.COMPLETE, Fate.FAIL, Fate.PARTIAL})  # accepted, then an outcome
CANCELING = frozenset({Fate.CANCEL, Fate.NOPROP, Fate.CANCELED})

# Fault kinds: profile §1.2 reasons for rejections, issue 3 flag kinds for flags.
STRAY_KINDS = (
    "bad-signature",
    "untrusted-key",
    "wrong-audience",
    "stale",
    "broken-chain",
    "cycle",
    "too-deep",
    "policy",
    "ref-mismatch",
)
FLAG_KINDS = (
    "lost-outcome",
    "status-conflict",
    "cancel-not-propagated",
    "cancel-race",
    "partial-failure",
)
FAULT_KINDS = (*STRAY_KINDS, "equivocation", *FLAG_KINDS)
VARIANTS: dict[str, tuple[str | None, ...]] = {
    "bad-signature": ("corrupted", "wrong-key"),
    "untrusted-key": ("unknown-issuer", "embedded-key"),
    "stale": ("expired", "future"),
    "broken-chain": ("dropped", "reordered"),
    "policy": ("dialog",),
    "ref-mismatch": ("digest", "salted-digest"),
    "equivocation": ("content", "signature-only"),
    "status-conflict": ("accept-reject", "complete-fail", "duplicate-slot"),
    "cancel-not-propagated": ("missing", "late"),
    "cancel-race": ("outcome-first", "cancel-first"),
}


@dataclass
class Stray:
    """A rejection fault: an extra offer issued by a hop's delegate that its receiver must
    refuse. It gets no status and no children."""

    kind: str
    variant: str | None


@dataclass(eq=False)
class Edge:
    """One hop: ``src`` delegates to ``dst``. ``run`` is filled in by the simulation."""

    src: Agent
    dst: Agent
    parent: Edge | None
    fate: Fate = Fate.COMPLETE
    variant: str | None = None
    twin: str | None = None  # equivocation variant: a second offer for this hop
    children: list[Edge] = field(default_factory=list)
    strays: list[Stray] = field(default_factory=list)
    run: Any = None

    @property
    def depth(self) -> int:
        return 1 if self.parent is None else self.parent.depth + 1

    def lineage(self) -> list[Edge]:
        """The hops from the dialog's first down to this one."""
        edges = [self]
        while edges[-1].parent is not None:
            edges.append(edges[-1].parent)
        return edges[::-1]

    def path_agents(self) -> set[str]:
        """Every issuer on the way here and the delegate: none may appear again below."""
        return {e.src.iss for e in self.lineage()} | {self.dst.iss}

    def walk(self) -> Iterator[Edge]:
        yield self
        for child in self.children:
            yield from child.walk()

    def under_cancel(self) -> bool:
        return any(e.fate in CANCELING for e in self.lineage())

    def clean_below(self) -> bool:
        return all(e.fate in CLEAN and not e.twin and not e.strays for e in self.walk())


class Deck:
    """Fault kinds dealt from a shuffled deck: every kind appears once per round, so a run
    with at least as many faults as kinds has them all."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.cards: list[str] = []

    def deal(self) -> str:
        if not self.cards:
            self.cards = list(FAULT_KINDS)
            self.rng.shuffle(self.cards)
        return self.cards.pop()


class Planner:
    """Builds one dialog's tree and places its faults."""

    def __init__(self, rng: random.Random, cast: Cast) -> None:
        self.rng = rng
        self.cast = cast

    # -- the tree ------------------------------------------------------------------------

    def tree(self) -> Edge:
        assistant = self.rng.choice(self.cast.by_role("assistant"))
        planners = [a for a in self.cast.by_role("planner") if a is not assistant]
        root = Edge(assistant, self.rng.choice(planners), None)
        root.fate = self.rng.choices((Fate.COMPLETE, Fate.FAIL), (85, 15))[0]
        for _ in range(self.rng.choices((1, 2, 3, 4), (25, 40, 25, 10))[0]):
            self.grow(root, recurse=True)
        return root

    def _pick(self, under: Edge) -> Agent | None:
        taken = under.path_agents()
        free = [a for a in self.cast.agents if a.iss not in taken]
        workers = [a for a in free if a.role in WORKER_ROLES]
        pool = workers or free
        return self.rng.choice(pool) if pool else None

    def grow(self, under: Edge, *, recurse: bool = False) -> Edge | None:
        """A new hop from ``under``'s delegate to an agent not yet on the path."""
        dst = self._pick(under)
        if dst is None:
            return None
        edge = Edge(under.dst, dst, under)
        under.children.append(edge)
        if not recurse:
            return edge
        weights = (78, 10, 7, 5)
        edge.fate = self.rng.choices((Fate.COMPLETE, Fate.FAIL, Fate.REJECT, Fate.SILENT), weights)[
            0
        ]
        deeper = (0.5, 0.3, 0.15)[edge.depth - 2] if edge.depth <= 4 else 0.0
        if edge.fate in WORKING and edge.depth < MAX_DEPTH and self.rng.random() < deeper:
            for _ in range(self.rng.choice((1, 1, 2))):
                self.grow(edge, recurse=True)
        return edge

    # -- faults --------------------------------------------------------------------------

    def _choose(self, root: Edge, ok: Any) -> Edge | None:
        hosts = [e for e in root.walk() if ok(e)]
        return self.rng.choice(hosts) if hosts else None

    def place(self, root: Edge, kind: str) -> None:
        """Put one fault of ``kind`` into the tree, growing it when no hop fits."""
        variants = VARIANTS.get(kind, (None,))
        variant = self.rng.choice(variants)
        if kind in STRAY_KINDS:
            self._place_stray(root, kind, variant)
        elif kind == "equivocation":
            self._place_twin(root, variant)
        elif kind == "cancel-not-propagated":
            self._place_noprop(root, variant)
        elif kind == "partial-failure":
            edge = self._choose(root, lambda e: e.fate in WORKING and not e.under_cancel())
            (edge or root).fate = Fate.PARTIAL  # the root always works and is never canceled
        else:
            fate = {"lost-outcome": Fate.LOST, "status-conflict": Fate.CONFLICT}.get(kind)
            edge = self._choose(root, self._quiet_leaf) or self.grow(root)
            assert edge is not None, "the planner always has agents to delegate to"
            edge.fate, edge.variant = fate or Fate.RACE, variant

    def _place_stray(self, root: Edge, kind: str, variant: str | None) -> None:
        # broken-chain needs a carried chain of two offers to drop or swap one of.
        depth = 2 if kind == "broken-chain" else 1

        def ok(e: Edge) -> bool:
            # The stray goes to an agent not yet on the path: handing it to an earlier
            # issuer would make it a cycle as well (only ``cycle`` itself does that).
            free = kind == "cycle" or len(e.path_agents()) < len(self.cast.agents)
            return e.fate in WORKING and not e.under_cancel() and e.depth >= depth and free

        host = self._choose(root, ok) or self.grow(root)
        assert host is not None
        host.strays.append(Stray(kind, variant))

    def _place_twin(self, root: Edge, variant: str | None) -> None:
        def ok(e: Edge) -> bool:
            return e.fate in WORKING and not e.twin and not e.under_cancel()

        host = None
        if variant == "signature-only":
            # Only ECDSA has a second valid signature over the same octets (Ed25519 is
            # deterministic); without an ES256 delegator the twin differs in content.
            host = self._choose(root, lambda e: ok(e) and e.src.alg == "ES256")
            variant = "signature-only" if host is not None else "content"
        host = host or self._choose(root, ok) or self.grow(root)
        assert host is not None
        host.twin = variant

    def _quiet_leaf(self, e: Edge) -> bool:
        return (
            e.parent is not None
            and e.fate in (Fate.COMPLETE, Fate.FAIL)
            and not e.children
            and not e.strays
            and not e.twin
            and not e.under_cancel()
        )

    def _cancelable(self, e: Edge) -> bool:
        return (
            e.parent is not None
            and e.fate in (Fate.COMPLETE, Fate.FAIL)
            and e.clean_below()
            and not e.under_cancel()
        )

    def _place_noprop(self, root: Edge, variant: str | None) -> None:
        edge = self._choose(root, lambda e: self._cancelable(e) and bool(e.children))
        if edge is None:
            edge = self.grow(root)
            assert edge is not None and self.grow(edge) is not None
        edge.fate, edge.variant = Fate.NOPROP, variant
        if variant == "late":
            # Everything below is still working when the late cancel reaches it.
            for below in list(edge.walk())[1:]:
                below.fate = Fate.CANCELED

    def cancel_some(self, root: Edge) -> None:
        """Clean traffic: now and then a delegator cancels a hop while its whole subtree is
        still working, and the cancel propagates down in time."""
        if self.rng.random() >= 0.15:
            return
        edge = self._choose(root, self._cancelable)
        if edge is not None:
            edge.fate = Fate.CANCEL
            for below in list(edge.walk())[1:]:
                below.fate = Fate.CANCELED
