"""Generating a demo run dialog by dialog, and writing it out as it comes.

``generate`` is an iterator: it holds one dialog at a time. ``write_demo`` merges the
dialogs' records into receive-time order through a heap that holds only the records of
dialogs still running (a dialog starts after every earlier one, so records older than the
newest dialog's start can never be overtaken and are written at once). Memory stays
proportional to the dialogs alive at one moment, never to the capture.
"""

from __future__ import annotations

import heapq
import json
import random
from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import cbor2
from handoff_context import Form

from app.demo.agents import Cast, make_cast
from app.demo.cases import CaseSim, EnvelopeDeck, plan_case
from app.demo.plan import Deck, Planner
from app.demo.simulate import CANCEL_GRACE, LOST_OUTCOME_AFTER, SKEW, DialogOutput, DialogSim

DEFAULT_START = 1_793_000_000
COSE_SHARE = 0.15  # dialogs whose agents speak CBOR (COSE_Sign1) end to end


@dataclass(frozen=True)
class DemoConfig:
    seed: int = 1
    dialogs: int = 100
    agents: int = 12
    fault_rate: float = 0.1
    start: int = DEFAULT_START
    cases: int | None = None  # envelope cases; None: one per two dialogs

    @property
    def case_count(self) -> int:
        return self.dialogs // 2 if self.cases is None else self.cases


def generate(config: DemoConfig, cast: Cast) -> Iterator[DialogOutput]:
    """Yield each dialog's records, answer-key lines and ref objects, in start order, with
    the envelope cases spread among them (a case starts with the dialog before it).

    Every choice comes from random generators seeded by ``config.seed`` (one per dialog,
    one per case, one for each fault deck), so a seed fixes the structure, the hop
    identifiers and the answer key; only ECDSA signatures (and so digests) differ between
    runs.
    """
    deck = Deck(random.Random(f"handoff-trace-demo:{config.seed}:deck"))
    envelope_deck = EnvelopeDeck(random.Random(f"handoff-trace-demo:{config.seed}:envelope-deck"))
    cases = config.case_count
    next_case = 0
    start = config.start
    for index in range(config.dialogs):
        rng = random.Random(f"handoff-trace-demo:{config.seed}:dialog:{index}")
        if index:
            start += rng.randint(5, 90)
        planner = Planner(rng, cast)
        root = planner.tree()
        faults = sum(rng.random() < config.fault_rate for _ in root.walk())
        for _ in range(faults):
            planner.place(root, deck.deal())
        planner.cancel_some(root)
        form = Form.COSE if rng.random() < COSE_SHARE else Form.JWS
        dialog = f"ctx-{index:06d}-{rng.getrandbits(32):08x}"
        sim = DialogSim(rng, cast, index=index, dialog=dialog, start=start, form=form)
        yield sim.run(root)
        while next_case < cases and next_case * config.dialogs // cases <= index:
            yield _case(config, cast, envelope_deck, next_case, start)
            next_case += 1
    for number in range(next_case, cases):  # a run without dialogs
        yield _case(config, cast, envelope_deck, number, start)


def _case(
    config: DemoConfig, cast: Cast, deck: EnvelopeDeck, number: int, start: int
) -> DialogOutput:
    rng = random.Random(f"handoff-trace-demo:{config.seed}:case:{number}")
    plan = plan_case(rng, deck, config.fault_rate)
    index = config.dialogs + number  # after every dialog's index: no ties in the merge
    return CaseSim(rng, cast, index=index, number=number, start=start).run(plan)


@dataclass(frozen=True)
class DemoPaths:
    """Where a run goes: X.jsonl (JWS dialogs), X.cbor (COSE dialogs), X.objects/ (ref
    objects), the trust file and the optional answer key."""

    out: Path
    cbor: Path
    objects: Path
    trust: Path
    answers: Path | None

    @classmethod
    def beside(cls, out: Path, *, trust: Path | None, answers: Path | None) -> DemoPaths:
        stem = out.with_suffix("") if out.suffix else out
        return cls(
            out=out,
            cbor=stem.with_name(stem.name + ".cbor"),
            objects=stem.with_name(stem.name + ".objects"),
            trust=trust or stem.with_name(stem.name + ".trust.json"),
            answers=answers,
        )


@dataclass
class Summary:
    dialogs: int = 0
    cases: int = 0
    json_records: int = 0
    cbor_records: int = 0
    objects: int = 0
    faults: Counter[str] = field(default_factory=Counter)
    first: int | None = None
    last: int | None = None

    @property
    def suggested_now(self) -> int | None:
        """A clock at which every time-based flag of the run is due: one lost-outcome
        window after the last receive, plus the skew and the cancel grace."""
        if self.last is None:
            return None
        return self.last + LOST_OUTCOME_AFTER + SKEW + CANCEL_GRACE + 1


class _Merger:
    """Writes records in receive-time order (ties: dialog, then emission order)."""

    def __init__(self, jsonl: BinaryIO, cbor: BinaryIO, summary: Summary) -> None:
        self.jsonl, self.cbor, self.summary = jsonl, cbor, summary
        self.heap: list[tuple[int, int, int, bool, dict[str, Any]]] = []

    def push(self, dialog: DialogOutput) -> None:
        cose = dialog.form is Form.COSE
        for r in dialog.records:
            heapq.heappush(self.heap, (r.at, dialog.index, r.seq, cose, r.value))

    def flush(self, before: int | None = None) -> None:
        while self.heap and (before is None or self.heap[0][0] < before):
            at, _, _, cose, value = heapq.heappop(self.heap)
            s = self.summary
            s.first = at if s.first is None else min(s.first, at)
            s.last = at if s.last is None else max(s.last, at)
            if cose:
                self.cbor.write(cbor2.dumps(value))
                s.cbor_records += 1
            else:
                self.jsonl.write(json.dumps(value, separators=(",", ":")).encode() + b"\n")
                s.json_records += 1


def write_demo(config: DemoConfig, paths: DemoPaths, *, cast: Cast | None = None) -> Summary:
    """Generate and write a demo run. Raises OSError when an output cannot be written."""
    cast = cast or make_cast(config.seed, config.agents)
    summary = Summary()
    paths.objects.mkdir(exist_ok=True)
    with ExitStack() as stack:
        jsonl = stack.enter_context(paths.out.open("wb"))
        cbor = stack.enter_context(paths.cbor.open("wb"))
        answers = stack.enter_context(paths.answers.open("w")) if paths.answers else None
        paths.trust.write_text(json.dumps(cast.trust_document(), indent=2) + "\n")
        merger = _Merger(jsonl, cbor, summary)
        for dialog in generate(config, cast):
            merger.flush(before=dialog.start)
            merger.push(dialog)
            if dialog.case:
                summary.cases += 1
            else:
                summary.dialogs += 1
            for line in dialog.answers:
                summary.faults[line["fault"]] += 1
                if answers is not None:
                    answers.write(json.dumps(line) + "\n")
            for name, content in dialog.objects:
                (paths.objects / name).write_bytes(content)
                summary.objects += 1
        merger.flush()
    return summary
