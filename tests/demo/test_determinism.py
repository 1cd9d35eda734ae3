"""Same seed, same run (apart from ECDSA signatures); and the generator streams."""

from __future__ import annotations

import base64
import io
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import cbor2

from app.demo import DemoConfig, DemoPaths, generate
from app.demo.agents import make_cast

from .helpers import make_run

_DIGESTS = ("prev", "offer")  # digests that name ES256 octets change between runs


def _decoded(payload: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in payload.items() if k not in _DIGESTS}


def _jws_payload(text: str) -> dict[str, Any]:
    body = text.split(".")[1]
    return _decoded(json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))))


def _normalise(value: Any) -> Any:
    """Every element replaced by its payload without the digests that depend on ECDSA
    randomness: what must be equal between two runs of one seed."""
    if isinstance(value, str) and value.startswith("eyJ") and value.count(".") == 2:
        return _jws_payload(value)
    if isinstance(value, bytes):
        return _decoded(cbor2.loads(cbor2.loads(value).value[2]))
    if isinstance(value, dict):
        return {k: _normalise(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_normalise(v) for v in value]
    return value


def _records(run_dir: Path) -> list[Any]:
    lines = (run_dir / "capture.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines]
    cbor = (run_dir / "capture.cbor").read_bytes()
    stream = io.BytesIO(cbor)
    while stream.tell() < len(cbor):
        records.append(cbor2.load(stream))
    return [_normalise(r) for r in records]


def test_same_seed_same_run(tmp_path: Path) -> None:
    runs = []
    for name in ("one", "two"):
        (tmp_path / name).mkdir()
        runs.append(make_run(tmp_path / name, seed=42, dialogs=25, fault_rate=0.4))
    one, two = runs
    assert one.paths.trust.read_bytes() == two.paths.trust.read_bytes()
    assert (one.summary.json_records, one.summary.cbor_records) == (
        two.summary.json_records,
        two.summary.cbor_records,
    )

    def key(answers: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [{k: v for k, v in a.items() if k != "offer"} for a in answers]

    assert key(one.answers) == key(two.answers) and len(one.answers) > 15
    assert _records(tmp_path / "one") == _records(tmp_path / "two")
    objects = sorted(p.name for p in one.paths.objects.iterdir())
    assert objects == sorted(p.name for p in two.paths.objects.iterdir())


def test_another_seed_another_run(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    a = make_run(tmp_path / "a", seed=1, dialogs=10, fault_rate=0.5)
    b = make_run(tmp_path / "b", seed=2, dialogs=10, fault_rate=0.5)
    assert [x["hop"] for x in a.answers] != [x["hop"] for x in b.answers]


def test_generate_is_a_stream_of_dialogs_and_cases() -> None:
    cast = make_cast(3, 8)
    outputs = generate(DemoConfig(seed=3, dialogs=10**9), cast)  # lazily: never all made
    assert iter(outputs) is outputs
    first, case, second = next(outputs), next(outputs), next(outputs)
    assert not first.case and case.case and not second.case
    assert (first.index, second.index) == (0, 1) and second.start > first.start
    assert first.records and all(r.at >= first.start for r in first.records)
    # A case starts with the dialog before it, so the writer's merge order holds.
    assert case.start == first.start and all(r.at >= case.start for r in case.records)


# Run in a fresh interpreter: in a large test session, writing thousands of object files
# interns each new file name and can resize the process-wide table of interned strings,
# megabytes at once, which says nothing about what the writer holds.
_MEASURE = """
import json, sys, tracemalloc
from pathlib import Path
from app.demo import DemoConfig, DemoPaths, write_demo
from app.demo.agents import make_cast
root = Path(sys.argv[1])
cast = make_cast(4, 12)
paths = DemoPaths.beside(root / "big.jsonl", trust=None, answers=root / "a.jsonl")
tracemalloc.start()
summary = write_demo(DemoConfig(seed=4, dialogs=400, fault_rate=0.2), paths, cast=cast)
print(json.dumps({"dialogs": summary.dialogs, "peak": tracemalloc.get_traced_memory()[1]}))
"""


def test_writing_keeps_memory_flat(tmp_path: Path) -> None:
    """Peak memory while writing stays far below the size of what is written: the writer
    holds only the dialogs still running (a few), never the capture."""
    done = subprocess.run(
        [sys.executable, "-c", _MEASURE, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    measured = json.loads(done.stdout.splitlines()[-1])
    paths = DemoPaths.beside(tmp_path / "big.jsonl", trust=None, answers=tmp_path / "a.jsonl")
    written = paths.out.stat().st_size + paths.cbor.stat().st_size
    assert measured["dialogs"] == 400 and written > 5 * 2**20
    peak = measured["peak"]
    assert peak < 3 * 2**20, f"peak {peak} bytes while writing {written}"


def test_the_make_run_demo_holds_every_envelope_fault_kind() -> None:
    """``make run`` (run-demo's defaults: 40 dialogs, seed 7) shows every kind of case flag."""
    from app.cli.run import demo_config
    from app.demo.cases import ENVELOPE_FAULTS

    config = demo_config(dialogs=40, seed=7, start=0)
    kinds = set()
    for output in generate(config, make_cast(config.seed, config.agents)):
        kinds.update(a["fault"] for a in output.answers if output.case)
    assert kinds == set(ENVELOPE_FAULTS)
