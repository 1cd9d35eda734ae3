"""The conformance kit: judge the published vectors and compare with what each must produce.

    python -m handoff_context.conformance --verify-cmd "OTHER verify --json --trust {trust} \
        --receiver {receiver} --at {at} --dialog {dialog} --skew {skew} \
        --max-lifetime {max_lifetime} --max-chain {max_chain} --ref-policy {ref_policy} \
        --objects {objects} {input}"

A vector (``handoff_context/vectors``, README.md there) is one JSON document: a capture to
verify, the profile §12 verify parameters, and the profile §11 verdicts the capture must produce.
``check_vector`` compares what a *runner* answered with those expectations; a runner is any
callable that judges one vector and answers the verdicts as profile §11 JSON (the shape
``Verdict.to_json`` writes), or ``Refused`` when it gave no verdicts (it refused the trust
file, or failed). ``library_verdicts`` is this library's own runner; ``command_runner``
drives another implementation's verify command through files and its JSON output, the way
``handoff-trace verify --json`` is driven. Without ``--verify-cmd`` the command checks this
library itself.
"""

from __future__ import annotations

import argparse
import io
import json
import shlex
import string
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
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
    "command_runner",
    "library_verdicts",
    "load_vector",
    "main",
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
    """The vector's input as a capture file (profile §10): JSON Lines, or a CBOR sequence."""
    if doc["input_format"] == "cbor":
        return f"{doc['name']}.cbor", b"".join(_b64u(item) for item in doc["input"])
    lines = "".join(json.dumps(item) + "\n" for item in doc["input"])
    return f"{doc['name']}.jsonl", lines.encode()


def trust_of(doc: dict[str, Any], directory: Path = DIRECTORY) -> Any:
    """The vector's trust document: inline, or the file it names beside the vectors."""
    trust = doc["trust"]
    return json.loads((directory / trust).read_bytes()) if isinstance(trust, str) else trust


def objects_of(doc: dict[str, Any]) -> ObjectIndex:
    """The objects available for ref checks (profile §5)."""
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
    """How one profile §11 verdict (as JSON) differs from one ``expect`` entry."""
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
        return [f"{name}: no verdicts: {answer.message}"]
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


# --- another implementation's verify command ----------------------------------------------

PLACEHOLDERS = (
    "trust",
    "input",
    "receiver",
    "at",
    "dialog",
    "skew",
    "max_lifetime",
    "max_chain",
    "ref_policy",
    "objects",
)


def check_template(template: str) -> list[str]:
    """The command template split into arguments. Raises ValueError when it cannot be
    split, names an unknown placeholder, or lacks ``{trust}`` or ``{input}``."""
    args = shlex.split(template)
    named = {
        field
        for arg in args
        for _, field, _, _ in string.Formatter().parse(arg)
        if field is not None
    }
    unknown = named - set(PLACEHOLDERS)
    if unknown:
        raise ValueError(f"unknown placeholders {sorted(unknown)}; known: {list(PLACEHOLDERS)}")
    if not {"trust", "input"} <= named:
        raise ValueError("the command must name {trust} and {input}")
    return args


def _write_inputs(doc: dict[str, Any], directory: Path, folder: Path) -> dict[str, str]:
    """The vector's trust file, objects folder and capture file under ``folder``, and the
    value of every placeholder."""
    trust = folder / "trust.json"
    trust.write_text(json.dumps(trust_of(doc, directory)))
    objects = folder / "objects"
    objects.mkdir()
    for o in doc["objects"]:
        (objects / o["name"]).write_bytes(_b64u(o["content"]))
        if "salt" in o:
            (objects / f"{o['name']}.salt").write_bytes(_b64u(o["salt"]))
    name, data = capture_of(doc)
    capture = folder / name
    capture.write_bytes(data)
    policy = doc["policy"]
    values = {
        "trust": str(trust),
        "input": str(capture),
        "objects": str(objects),
        "at": doc["at"],
        "receiver": doc["receiver"],
        "dialog": doc["dialog"],
        "skew": policy["skew"],
        "max_lifetime": policy["max_lifetime"],
        "max_chain": policy["max_chain"],
        "ref_policy": policy["ref_policy"],
    }
    return {k: str(v) for k, v in values.items() if v is not None}


def command_runner(template: str, *, timeout: float = 120.0) -> Runner:
    """A runner that runs ``template`` once per vector (placeholders: ``PLACEHOLDERS``;
    ``{trust}``, ``{objects}`` and ``{input}`` are files written for the vector) and reads
    the profile §11 verdicts it prints as one JSON array on standard output. Exit status 0 or 1
    with that array is an answer; anything else is ``Refused``. Raises ValueError for a bad
    template (``check_template``)."""
    args = check_template(template)

    def run(doc: dict[str, Any], directory: Path) -> Answer:
        with tempfile.TemporaryDirectory(prefix="handoff-conformance-") as tmp:
            values = _write_inputs(doc, directory, Path(tmp))
            try:
                argv = [arg.format_map(values) for arg in args]
            except KeyError as exc:
                return Refused(f"the vector gives no {exc.args[0]} for the command")
            try:
                done = subprocess.run(
                    argv, capture_output=True, timeout=timeout, check=False, cwd=tmp
                )
            except (OSError, subprocess.TimeoutExpired) as exc:
                return Refused(f"cannot run {argv[0]}: {exc}")
        return _answer(done)

    return run


def _answer(done: subprocess.CompletedProcess[bytes]) -> Answer:
    stderr = done.stderr.decode("utf-8", "replace").strip().splitlines()
    why = f"exit {done.returncode}" + (f": {stderr[-1]}" if stderr else "")
    if done.returncode not in (0, 1):
        return Refused(why)
    try:
        verdicts = json.loads(done.stdout)
    except ValueError:
        return Refused(f"{why}; standard output is not JSON")
    if not isinstance(verdicts, list) or not all(isinstance(v, dict) for v in verdicts):
        return Refused(f"{why}; standard output is not a JSON array of verdicts")
    return verdicts


# --- the command ----------------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m handoff_context.conformance",
        description="Run the published handoff-context vectors against a verify command and "
        "report each vector's pass or fail (exit 1 on any failure).",
    )
    p.add_argument(
        "--verify-cmd",
        metavar="TEMPLATE",
        help="the command to judge one vector, with placeholders "
        + ", ".join("{" + n + "}" for n in PLACEHOLDERS)
        + "; it must print the profile §11 verdicts as a JSON array (default: this library)",
    )
    p.add_argument(
        "--vectors",
        type=Path,
        default=DIRECTORY,
        metavar="DIR",
        help="a vectors folder (default: the published ones)",
    )
    p.add_argument(
        "--only",
        nargs="+",
        metavar="NAME",
        help="run only the vectors with these names",
    )
    p.add_argument("--jobs", type=int, default=1, metavar="N", help="commands run at once")
    p.add_argument("--timeout", type=float, default=120.0, metavar="SECONDS")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Exit 0 when every vector passes, 1 when any fails, 2 for a usage error."""
    args = _parser().parse_args(argv)
    run: Runner = library_verdicts
    exact = args.verify_cmd is None
    if args.verify_cmd is not None:
        try:
            run = command_runner(args.verify_cmd, timeout=args.timeout)
        except ValueError as exc:
            print(f"conformance: {exc}", file=sys.stderr)
            return 2
    paths = [p for p in stored_vectors(args.vectors) if not args.only or p.stem in args.only]
    if not paths:
        print("conformance: no vectors selected", file=sys.stderr)
        return 2

    def judge(path: Path) -> list[str]:
        return check_vector(load_vector(path), args.vectors, run, exact_refusal=exact)

    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        results = list(pool.map(judge, paths))
    failed = 0
    for path, problems in zip(paths, results, strict=True):
        print(f"{'FAIL' if problems else 'pass'} {path.stem}")
        for problem in problems:
            print(f"     {problem}")
        failed += bool(problems)
    print(f"{len(paths)} vectors: {len(paths) - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
