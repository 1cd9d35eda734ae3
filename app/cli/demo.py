"""``handoff-trace demo``: write simulated multi-agent traffic with known faults."""

from __future__ import annotations

import argparse
import importlib.util
import math
import os
import sys
from pathlib import Path
from typing import Any

from handoff_context import Policy, Timing

from app.cli.common import nonneg_int
from app.demo import DEFAULT_START, DemoConfig, DemoPaths, Summary, write_demo
from app.demo.agents import MIN_AGENTS

MAX_AGENTS = 10_000
# The defaults the help text states live in the library, as does every receiver default.
_POLICY, _TIMING = Policy(), Timing()
_CAPTURE_SUFFIXES = (".jsonl", ".ndjson")

DEMO_EPILOG = f"""\
outputs, for --out X.jsonl:
  X.jsonl      capture records (profile §10) of the JWS dialogs, in receive-time order:
               A2A 1.0 / 0.3 JSON-RPC, MCP tools/call / CallToolResult /
               notifications/cancelled, raw handoff and status objects; and the
               envelope cases (docs/envelopes.md): A2A handoff messages with envelope
               data parts and signed-URL references, acceptance and rejection tasks,
               case_event records
  X.cbor       CBOR sequence of capture records of the COSE dialogs (CBOR elements
               cannot travel in JSON; a dialog keeps one form throughout)
  X.objects/   objects that refs and envelope references name, for --ref-policy
               check-available --objects
  --trust-out  trust file of the agents (default X.trust.json); one rogue agent is left out
  --answer-key one JSON line per injected fault: {{"fault", "variant", "iss", "hop",
               "offer", "dialog", "case", "detail"}}; fault is a profile §1.2 reject reason or
               a flag kind; an envelope fault has "offer": null, the handoff id as "hop"
               and its case id as "case"

Faults assume the default receiver parameters (skew {_POLICY.skew} s, lifetime \
{_POLICY.max_lifetime} s, chain {_POLICY.max_chain},
lost-outcome after {_TIMING.lost_outcome_after} s). The summary on stderr gives a --now past \
every time-based flag.

example:
  handoff-trace demo --seed 7 --dialogs 300 --fault-rate 0.1 --out demo/capture.jsonl \\
      --answer-key demo/answers.jsonl
  handoff-trace verify --trust demo/capture.trust.json --ref-policy check-available \\
      --objects demo/capture.objects demo/capture.jsonl demo/capture.cbor

Same seed, same run (default start {DEFAULT_START}), apart from ECDSA signatures and the
digests that depend on them.
"""


def _agents(text: str) -> int:
    value = nonneg_int(text)
    if not MIN_AGENTS <= value <= MAX_AGENTS:
        raise argparse.ArgumentTypeError(f"{text!r} must be between {MIN_AGENTS} and {MAX_AGENTS}")
    return value


def _rate(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not (math.isfinite(value) and 0.0 <= value <= 1.0):
        raise argparse.ArgumentTypeError(f"{text!r} is outside 0..1")
    return value


def _seed(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None


def add_demo(sub: Any) -> None:
    p = sub.add_parser(
        "demo",
        help="generate simulated multi-agent traffic with known faults",
        description="Simulate dialogs between agents that delegate in trees over A2A, MCP "
        "and raw handoff objects, and cases handed between agents in A2A envelope handoffs; "
        "inject faults at a chosen rate, and write the capture, the agents' trust file and "
        "an answer key of every injected fault.",
        epilog=DEMO_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--seed", type=_seed, default=1, help="random seed (default: 1)")
    p.add_argument("--dialogs", type=nonneg_int, default=100, metavar="N", help="default: 100")
    p.add_argument(
        "--agents",
        type=_agents,
        default=12,
        metavar="N",
        help=f"trusted agents, {MIN_AGENTS} to {MAX_AGENTS} (default: 12)",
    )
    p.add_argument(
        "--cases",
        type=nonneg_int,
        metavar="N",
        help="envelope cases handed between agents (default: one per two dialogs)",
    )
    p.add_argument(
        "--fault-rate",
        type=_rate,
        default=0.1,
        metavar="RATE",
        help="chance, per hop and per case handoff, of injecting one fault, 0..1 (default: 0.1)",
    )
    p.add_argument("--out", required=True, metavar="X.jsonl", help="the capture (JSON Lines)")
    p.add_argument("--trust-out", metavar="TRUST.json", help="default: X.trust.json")
    p.add_argument("--answer-key", metavar="ANSWERS.jsonl", help="default: not written")
    p.add_argument(
        "--start",
        type=nonneg_int,
        default=DEFAULT_START,
        metavar="SECONDS",
        help=f"simulated clock at the first dialog (default: {DEFAULT_START})",
    )
    p.add_argument(
        "--deep-dialog",
        type=nonneg_int,
        default=0,
        metavar="HOPS",
        help="also write one big dialog of HOPS hops whose deepest path goes 80 levels "
        "down, ending at a hop delegated to 'needle-1' (default: none)",
    )
    p.add_argument(
        "--load",
        action="store_true",
        help="also ingest the run into the configured database (DATABASE_URL, else the "
        "embedded SQLite file), with its trust file and ref objects",
    )
    p.set_defaults(func=cmd_demo)


def _usage_error(message: str) -> Exception:
    from app.cli.common import UsageError

    return UsageError(message)


def _check_writable(option: str, path: Path) -> None:
    """One clear line for an output that cannot be written, before any work is done (and
    without creating anything)."""
    parent = path.parent
    if path.is_dir():
        raise _usage_error(f"cannot write {option} {path}: it is a directory")
    if not parent.is_dir():
        raise _usage_error(f"cannot write {option} {path}: directory {parent} does not exist")
    target = path if path.exists() else parent
    if not os.access(target, os.W_OK):
        raise _usage_error(f"cannot write {option} {path}: permission denied")


def _paths(args: argparse.Namespace) -> DemoPaths:
    out = Path(args.out)
    if out.suffix.lower() not in _CAPTURE_SUFFIXES:
        raise _usage_error(f"--out {out} must name a JSON Lines file (.jsonl or .ndjson)")
    paths = DemoPaths.beside(
        out,
        trust=Path(args.trust_out) if args.trust_out else None,
        answers=Path(args.answer_key) if args.answer_key else None,
    )
    _check_writable("--out", paths.out)
    _check_writable("--out (its CBOR companion)", paths.cbor)
    _check_writable("--trust-out", paths.trust)
    if paths.answers is not None:
        _check_writable("--answer-key", paths.answers)
    if paths.objects.exists() and not paths.objects.is_dir():
        raise _usage_error(f"cannot write ref objects to {paths.objects}: not a directory")
    return paths


def _ingest_available() -> bool:
    return importlib.util.find_spec("app.ingest.pipeline") is not None


def cmd_demo(args: argparse.Namespace) -> int:
    if args.load and not _ingest_available():
        raise _usage_error("--load is not available yet: the store is not built")
    paths = _paths(args)
    config = DemoConfig(
        seed=args.seed,
        dialogs=args.dialogs,
        agents=args.agents,
        fault_rate=args.fault_rate,
        start=args.start,
        cases=args.cases,
    )
    try:
        summary = write_demo(config, paths)
        deep = _deep_dialog(args, config, paths, summary)
    except OSError as exc:
        raise _usage_error(f"cannot write the demo: {exc}") from exc
    _report(summary, paths)
    if deep:
        print(f"  deep dialog: {deep} ({args.deep_dialog} hops)", file=sys.stderr)
    if args.load:
        from app.cli.common import load_settings
        from app.demo.load import load_run

        # Read here, after the run is written, as ``--load`` always has: a bad setting
        # stops the load, not the writing.
        settings = load_settings()
        url = settings.store_url()
        return load_run(paths, now=summary.suggested_now, settings=settings, url=url)
    return 0


def _deep_dialog(
    args: argparse.Namespace, config: DemoConfig, paths: DemoPaths, summary: Summary
) -> str | None:
    """Append ``--deep-dialog`` hops in one dialog after the run; its dialog id."""
    if not args.deep_dialog:
        return None
    from app.demo.agents import make_cast
    from app.demo.deep import write_deep_dialog

    start = (summary.last or config.start) + 60
    with paths.out.open("ab") as out:
        return write_deep_dialog(
            out, make_cast(config.seed, config.agents), hops=args.deep_dialog, start=start,
            seed=config.seed,
        )  # fmt: skip


def _report(summary: Summary, paths: DemoPaths) -> None:
    err = sys.stderr
    faults = ", ".join(f"{n} {k}" for k, n in sorted(summary.faults.items())) or "none"
    print(
        f"demo: {summary.dialogs} dialogs and {summary.cases} envelope cases, "
        f"{summary.json_records} records in {paths.out}, "
        f"{summary.cbor_records} in {paths.cbor}, {summary.objects} ref objects in "
        f"{paths.objects}/",
        file=err,
    )
    print(f"demo: trust file {paths.trust}", file=err)
    answers = f"written to {paths.answers}" if paths.answers else "not written (--answer-key)"
    print(f"demo: {sum(summary.faults.values())} faults ({faults}); answer key {answers}", file=err)
    if summary.suggested_now is not None:
        print(
            f"demo: simulated clock {summary.first}..{summary.last}; judge hops and flags "
            f"with --now {summary.suggested_now} (past every lost-outcome deadline)",
            file=err,
        )
    print(
        f"demo: verify with: handoff-trace verify --trust {paths.trust} --ref-policy "
        f"check-available --objects {paths.objects} {paths.out} {paths.cbor}",
        file=err,
    )
