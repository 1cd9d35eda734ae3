"""The conformance kit: judge the published vectors and compare with what each must produce.

A vector (``handoff_context/vectors``, README.md there) is one JSON document: a capture to
verify, the SPEC 12 verify parameters, and the SPEC 11 verdicts the capture must produce.
``check_vector`` compares what a *runner* answered with those expectations; a runner is any
callable that judges one vector and answers the verdicts as SPEC 11 JSON (the shape
``Verdict.to_json`` writes), or ``Refused`` when it refused the vector's trust file.
``library_verdicts`` is this library's own runner.
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import cbor2

from handoff_context._encoding import MAX_DEPTH, b64url_decode
from handoff_context._refs import AvailableObject, ObjectIndex, RefPolicy
from handoff_context._trust import TrustStore
from handoff_context._verify import Context, Policy, Session, Verifier
from handoff_context.errors import TrustConfigError
from handoff_context.vectors import DIRECTORY, stored_vectors

__all__ = [
    "DIRECTORY",
    "Answer",
    "Refused",
    "Runner",
    "capture_of",
    "check_vector",
    "library_verdicts",
    "load_vector",
    "mismatches",
    "objects_of",
    "policy_of",
    "stored_vectors",
    "trust_of",
]


@dataclass(frozen=True)
class Refused:
    """The implementation refused the vector's trust file; ``message`` says why."""

    message: str


Answer = list[dict[str, Any]] | Refused
Runner = Callable[[dict[str, Any], Path], Answer]


def load_vector(path: Path) -> dict[str, Any]:
    """One vector document. Raises OSError or ValueError (not JSON)."""
    doc: dict[str, Any] = json.loads(path.read_bytes())
    return doc


def _b64u(text: str) -> bytes:
    return b64url_decode(text, what="vector data")


def capture_of(doc: dict[str, Any]) -> tuple[str, bytes]:
    """The vector's input as a capture file (SPEC 10): JSON Lines, or a CBOR sequence."""
    if doc["input_format"] == "cbor":
        return f"{doc['name']}.cbor", b"".join(_b64u(item) for item in doc["input"])
    lines = "".join(json.dumps(item) + "\n" for item in doc["input"])
    return f"{doc['name']}.jsonl", lines.encode()


def trust_of(doc: dict[str, Any], directory: Path = DIRECTORY) -> Any:
    """The vector's trust document: inline, or the file it names beside the vectors."""
    trust = doc["trust"]
    return json.loads((directory / trust).read_bytes()) if isinstance(trust, str) else trust


def objects_of(doc: dict[str, Any]) -> ObjectIndex:
    """The objects available for ref checks (SPEC 5)."""
    return ObjectIndex.of(
        AvailableObject(o["name"], _b64u(o["content"]), _b64u(o["salt"]) if "salt" in o else None)
        for o in doc["objects"]
    )


def policy_of(doc: dict[str, Any]) -> Policy:
    policy = doc["policy"]
    return Policy(
        skew=policy["skew"],
        max_lifetime=policy["max_lifetime"],
        max_chain=policy["max_chain"],
        ref_policy=RefPolicy(policy["ref_policy"]),
    )


def _items(doc: dict[str, Any]) -> Iterator[tuple[str, object]]:
    """The vector's payloads, named as a capture reader names them (``name.jsonl:N``,
    ``name.cbor#N``). CBOR items are decoded as strictly as a capture is: no duplicate
    keys, bounded nesting."""
    if doc["input_format"] != "cbor":
        for number, item in enumerate(doc["input"], start=1):
            yield f"{doc['name']}.jsonl:{number}", item
        return
    for number, item in enumerate(doc["input"], start=1):
        decoder = cbor2.CBORDecoder(
            io.BytesIO(_b64u(item)),
            max_depth=MAX_DEPTH,
            allow_duplicate_keys=False,
            strict_hashable_types=True,
        )
        yield f"{doc['name']}.cbor#{number}", decoder.decode()


def library_verdicts(doc: dict[str, Any], directory: Path = DIRECTORY) -> Answer:
    """Judge the vector with this library: one ``Session`` over its payloads, in order."""
    try:
        trust = TrustStore.from_mapping(trust_of(doc, directory))
    except TrustConfigError as exc:
        return Refused(str(exc))
    verifier = Verifier(trust=trust, policy=policy_of(doc), objects=objects_of(doc))
    session = Session(verifier)
    ctx = Context(now=doc["at"], receiver=doc["receiver"], dialog=doc["dialog"])
    for source, value in _items(doc):
        session.add(value, ctx, source=source)
    return [v.to_json() for v in session.verdicts]


def mismatches(expected: dict[str, Any], got: dict[str, Any]) -> list[str]:
    """How one SPEC 11 verdict (as JSON) differs from one ``expect`` entry."""
    out = []
    for key in ("outcome", "reason", "element"):
        if key in expected and got.get(key) != expected[key]:
            out.append(f"{key} {got.get(key)!r}, expected {expected[key]!r}")
    if "equivocation" in expected:
        variant = got.get("equivocation") and got["equivocation"].get("variant")
        if variant != expected["equivocation"]:
            out.append(f"equivocation {variant!r}, expected {expected['equivocation']!r}")
    if "partial" in expected and (got.get("chain") or {}).get("partial") != expected["partial"]:
        out.append(f"chain.partial is not {expected['partial']}")
    results = {c.get("check"): c.get("result") for c in got.get("checks") or []}
    for check, result in expected.get("checks", {}).items():
        if results.get(check) != result:
            out.append(f"check {check} {results.get(check)!r}, expected {result!r}")
    refs = [r.get("outcome") for r in got.get("refs") or []]
    if "refs" in expected and refs != expected["refs"]:
        out.append(f"refs {refs}, expected {expected['refs']}")
    detail = got.get("detail") or ""
    if "detail" in expected and expected["detail"].lower() not in str(detail).lower():
        out.append(f"detail {detail!r} does not mention {expected['detail']!r}")
    return out


def check_vector(
    doc: dict[str, Any],
    directory: Path = DIRECTORY,
    run: Runner = library_verdicts,
    *,
    exact_refusal: bool = True,
) -> list[str]:
    """Everything in which ``run``'s answer differs from the vector's expectations (an empty
    list: the vector passes). A trust-file vector passes when ``run`` refuses the file; with
    ``exact_refusal`` the refusal must also contain ``expect_trust_error``, this library's
    own wording (another implementation words its refusals its own way)."""
    name = doc["name"]
    answer = run(doc, directory)
    wanted_error = doc.get("expect_trust_error")
    if isinstance(answer, Refused):
        if wanted_error and (not exact_refusal or wanted_error in answer.message):
            return []
        return [f"{name}: trust file refused: {answer.message}"]
    if wanted_error:
        return [f"{name}: the trust file was accepted; expected a refusal ({wanted_error})"]
    got = [f"{v.get('outcome')}/{v.get('reason')}" for v in answer]
    if len(answer) != len(doc["expect"]):
        return [f"{name}: {len(answer)} verdicts {got}, expected {len(doc['expect'])}"]
    return [
        f"{name}: verdict {i}: {problem}"
        for i, (expected, verdict) in enumerate(zip(doc["expect"], answer, strict=True))
        for problem in mismatches(expected, verdict)
    ]
