"""``verify --json`` prints the same bytes as ``json.dumps(verdicts, indent=2)`` did before
it had its own writers (``app.ingest.json_text`` for JSON values, ``app.ingest.verdict_text`` for
verdicts): other tools parse that text. Pinned on real verdicts (every published vector,
and the simulator's mixed capture with its faults), on the whole command's output, and on
arbitrary JSON values."""

from __future__ import annotations

import enum
import json
import math
from pathlib import Path
from typing import Any

import pytest
from handoff_context import RefPolicy, TrustStore, Verdict
from handoff_context.conformance import capture_of, objects_of, trust_of
from handoff_context.errors import TrustConfigError
from handoff_context.vectors import stored_vectors
from hypothesis import given, settings
from hypothesis import strategies as st

from app.cli import main
from app.ingest.json_text import array_chunks, dumps
from app.ingest.verdict_text import VerdictWriter
from app.ingest.verifying import VerifyOptions, verify_inputs
from tests.demo.helpers import Run, make_run


def joined(values: list[Any], per_chunk: int = 256) -> str:
    return "".join(array_chunks(iter(values), per_chunk=per_chunk))


def written(verdicts: list[Verdict], per_chunk: int = 256) -> str:
    """What ``verify --json`` prints for ``verdicts`` (without the final newline)."""
    text_of = VerdictWriter().text
    return "".join(array_chunks(verdicts, per_chunk=per_chunk, text_of=text_of))


def vector_verdicts(path: Path) -> list[Verdict]:
    doc = json.loads(path.read_bytes())
    try:
        trust = TrustStore.from_mapping(trust_of(doc))
    except TrustConfigError:
        return []  # a vector about a refused trust file has no verdicts
    policy = doc["policy"]
    options = VerifyOptions(
        at=doc["at"],
        receiver=doc["receiver"],
        dialog=doc["dialog"],
        skew=policy["skew"],
        max_lifetime=policy["max_lifetime"],
        max_chain=policy["max_chain"],
        ref_policy=RefPolicy(policy["ref_policy"]),
    )
    report = verify_inputs([capture_of(doc)], trust=trust, options=options, objects=objects_of(doc))
    return report.verdicts


def test_every_vector_verdict_is_written_as_json_dumps_writes_it() -> None:
    everything: list[Verdict] = []
    for path in stored_vectors():
        verdicts = vector_verdicts(path)
        expected = json.dumps([v.to_json() for v in verdicts], indent=2)
        assert written(verdicts) == expected, path.stem
        assert joined([v.to_json() for v in verdicts]) == expected, path.stem
        everything.extend(verdicts)
    # The vectors cover what a verdict can hold: chains with their elements, refs,
    # equivocation evidence, statuses and every outcome.
    values = [v.to_json() for v in everything]
    assert written(everything, per_chunk=7) == json.dumps(values, indent=2)
    assert joined(values, per_chunk=7) == json.dumps(values, indent=2)
    assert {v["outcome"] for v in values} == {"accept", "reject", "duplicate", "pending"}
    assert {v["element"] for v in values} == {"offer", "status", None}
    assert any(v.get("chain") and v["chain"]["elements"] for v in values)
    assert any("chain" in v and v["chain"] is None for v in values)
    assert any(v.get("refs") for v in values)
    assert any(v.get("offer") for v in values)
    assert any(v["equivocation"] for v in values)


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    return make_run(tmp_path_factory.mktemp("mixed"), seed=5, dialogs=12, fault_rate=0.2)


def test_the_mixed_capture_is_written_as_json_dumps_writes_it(run: Run) -> None:
    verdicts = run.verify().verdicts
    values = [v.to_json() for v in verdicts]
    assert len(values) > 100
    assert written(verdicts) == json.dumps(values, indent=2)
    assert written(verdicts, per_chunk=1) == json.dumps(values, indent=2)
    assert joined(values) == json.dumps(values, indent=2)


def test_the_command_prints_json_dumps_of_its_verdicts(
    run: Run, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["verify", "--json", "--trust", str(run.paths.trust), "--at", "0"]
    argv += ["--ref-policy", "check-available", "--objects", str(run.paths.objects)]
    main([*argv, str(run.paths.out), str(run.paths.cbor)])
    printed = capsys.readouterr().out
    expected = [v.to_json() for v in run.verify().verdicts]
    assert printed == json.dumps(expected, indent=2) + "\n"


def test_no_verdicts_is_an_empty_array() -> None:
    assert written([]) == joined([]) == json.dumps([], indent=2) == "[]"


class Colour(enum.StrEnum):
    RED = "red"


class Size(enum.IntEnum):
    BIG = 7


scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()  # NaN and the infinities included: json.dumps writes them (allow_nan)
    | st.text()  # any code point, lone surrogates included (escaped by ensure_ascii)
    | st.sampled_from([Colour.RED, Size.BIG, 1e300, -0.0, math.inf])
)
values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=5)
        | st.tuples(inner, inner)
        | st.dictionaries(st.text(max_size=6), inner, max_size=6)
        # Keys json.dumps converts (numbers, booleans, None): the writer leaves those to it.
        | st.dictionaries(st.none() | st.booleans() | st.integers(), inner, max_size=3)
    ),
    max_leaves=30,
)


@settings(max_examples=300, deadline=None)
@given(values)
def test_any_json_value_is_written_as_json_dumps_writes_it(value: Any) -> None:
    assert dumps(value) == json.dumps(value, indent=2)
    assert joined([value, value], per_chunk=1) == json.dumps([value, value], indent=2)


def test_what_json_dumps_refuses_is_refused_alike() -> None:
    for bad in ({(1, 2): 3}, [object()], {"a": {1, 2}}):
        with pytest.raises(TypeError):
            json.dumps(bad, indent=2)
        with pytest.raises(TypeError):
            dumps(bad)
        with pytest.raises(TypeError):
            joined([bad])
