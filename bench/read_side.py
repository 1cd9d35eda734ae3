"""The read side of ``handoff-trace ingest``: everything before a batch's write transaction
except the signatures (issue 20). Reads the simulator's mixed capture as the pipeline does
(``read_capture`` with the envelope stage's ``read`` as ``on_item``, its pending items
dropped instead of stored) and parses every carried object (``judge.parse``), with no
database and no signature verified, so its instruction count under callgrind is a fixed
figure for a fixed capture:

    valgrind --tool=callgrind --callgrind-out-file=/tmp/x.%p \\
        .venv/bin/python bench/read_side.py --elements 300 --rounds 1 --keep DIR

and the same with ``--rounds 0``: the difference is one round. Count the first round only:
``parse_element`` keeps the last 1,024 elements it parsed, so a later round of a capture
that small parses nothing (with ``--elements 2000`` every round parses everything again).

Prints CPU us per element (median of ``--rounds``) and a checksum of what was read and
parsed, which must not change when the code does.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import tempfile
import time
from pathlib import Path
from typing import Any

from _support import interruptible
from handoff_context import RefPolicy, TrustStore
from ingest_bulk import make_capture

from app.capture.carriers import Carried, read_capture
from app.capture.formats import CaptureItem
from app.demo import DemoPaths
from app.ingest.build import Pipeline, freeze_start_up
from app.ingest.envelope import EnvelopeIngest
from app.ingest.judge import Parsed, parse
from app.ingest.verifying import VerifyOptions, load_objects
from app.store import db


def read_all(pipeline: Pipeline, inputs: list[tuple[str, bytes]], envelopes: EnvelopeIngest) -> str:
    """Read and parse every input as ingest does; a digest of what came out."""
    out = hashlib.sha256()

    def on_item(item: CaptureItem) -> bool:
        found = envelopes.read(item)
        envelopes.pending.clear()  # stored by the write side: not measured here
        return found

    for name, data in inputs:
        for found in read_capture(data, name=name, on_item=on_item):
            if isinstance(found, Carried):
                one = parse(found.value, pipeline)
                tag = one.element.digest if isinstance(one, Parsed) else repr(one.error).encode()
                out.update(tag + repr((found.source, found.key, found.received_at)).encode())
            else:
                out.update(repr(found).encode())
    return out.hexdigest()


def _capture(work: Path, elements: int, seed: int) -> dict[str, Any]:
    """The capture in ``work``, generated unless a run with the same arguments left it."""
    mark = work / "capture.json"
    if mark.exists():
        saved = json.loads(mark.read_text())
        if saved["elements"] == elements and saved["seed"] == seed:
            saved["paths"] = DemoPaths.beside(work / "capture.jsonl", trust=None, answers=None)
            return dict(saved)
    cap = make_capture(work, elements=elements, seed=seed, fault_rate=0.02, sample=1)
    kept = {"elements": elements, "seed": seed, "items": cap["items"], "now": cap["now"]}
    mark.write_text(json.dumps(kept))
    return cap


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--elements", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--keep",
        type=Path,
        help="a directory holding the capture: written there the first time, read after "
        "(so that a run under callgrind counts no generation)",
    )
    args = parser.parse_args()
    with interruptible(), tempfile.TemporaryDirectory(prefix="handoff-trace-bench-") as tmp:
        work = args.keep or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        cap = _capture(work, args.elements, args.seed)
        paths = cap["paths"]
        engine = db.make_engine("sqlite://")
        pipeline = Pipeline(
            engine=engine,
            trust=TrustStore.load(paths.trust),
            options=VerifyOptions(at=cap["now"], ref_policy=RefPolicy.CHECK_AVAILABLE),
            objects=load_objects(paths.objects),
        )
        envelopes = EnvelopeIngest(engine, pipeline.envelope, pipeline.objects, cap["now"])
        inputs = [(str(p), p.read_bytes()) for p in (paths.out, paths.cbor)]
        freeze_start_up()  # as the ingest command does: no full collection walks start-up
        samples: list[float] = []
        sums = set()
        for _ in range(args.rounds):
            start = time.process_time()
            sums.add(read_all(pipeline, inputs, envelopes))
            samples.append((time.process_time() - start) / cap["items"] * 1e6)
        assert len(sums) <= 1
        print(f"items {cap['items']} checksum {sums.pop()[:16] if sums else '-'}")
        if samples:
            us = sorted(samples)[len(samples) // 2]
            print(f"read side: CPU us per element {us:.1f} (median of {len(samples)})")


if __name__ == "__main__":
    main()
