"""A small demo run on disk, and what verifying it finds."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from handoff_context import HandoffObject, RefPolicy, TrustStore, b64url_encode, parse_object

from app.capture.carriers import Carried, read_capture
from app.demo import DemoConfig, DemoPaths, Summary, write_demo
from app.ingest.verifying import Report, VerifyOptions, load_objects, verify_inputs

REJECTIONS = frozenset(
    {
        "bad-signature",
        "untrusted-key",
        "wrong-audience",
        "stale",
        "broken-chain",
        "cycle",
        "too-deep",
        "policy",
        "ref-mismatch",
        "equivocation",
    }
)
FLAGS = frozenset(
    {"lost-outcome", "status-conflict", "cancel-not-propagated", "cancel-race", "partial-failure"}
)
ENVELOPE_FLAGS = frozenset(
    {
        "two-owners",
        "release-before-accept",
        "lost-acceptance",
        "no-owner",
        "stale-epoch",
        "expired-reference",
        "reference-mismatch",
        "missing-hash",
        "version-drift",
        "invalid-envelope",
        "context-id-reuse",
        "transcript-dump",
        "unsourced-fact",
    }
)


@dataclass
class Run:
    paths: DemoPaths
    summary: Summary
    answers: list[dict[str, Any]]

    def inputs(self) -> list[tuple[str, bytes]]:
        return [(str(p), p.read_bytes()) for p in (self.paths.out, self.paths.cbor)]

    def verify(self) -> Report:
        """``verify`` as the CLI help suggests: the run's trust file and ref objects."""
        return verify_inputs(
            self.inputs(),
            trust=TrustStore.load(self.paths.trust),
            options=VerifyOptions(at=0, ref_policy=RefPolicy.CHECK_AVAILABLE),
            objects=load_objects(self.paths.objects),
        )

    def carried(self) -> dict[str, Carried]:
        """Every carried object by its source name (as verdicts name it)."""
        found: dict[str, Carried] = {}
        for name, data in self.inputs():
            for item in read_capture(data, name=name):
                assert isinstance(item, Carried), item
                found[item.source] = item
        return found


def make_run(
    directory: Path, *, seed: int, dialogs: int, fault_rate: float, agents: int = 10
) -> Run:
    paths = DemoPaths.beside(
        directory / "capture.jsonl", trust=None, answers=directory / "answers.jsonl"
    )
    config = DemoConfig(seed=seed, dialogs=dialogs, agents=agents, fault_rate=fault_rate)
    summary = write_demo(config, paths)
    assert paths.answers is not None
    answers = [json.loads(line) for line in paths.answers.read_text().splitlines()]
    return Run(paths, summary, answers)


def offer_digest(value: Any) -> str:
    """The handoff digest of the offer in a carried handoff object, computed from its
    octets (a verdict has no digest when the element could not be parsed)."""
    obj = parse_object(value)
    assert isinstance(obj, HandoffObject)
    return b64url_encode(hashlib.sha256(obj.offer).digest())
