"""``handoff-trace keys new`` and ``handoff-trace sign``: make keys and signed bundles
from the command line, so a new user can produce a chain without writing code."""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from pathlib import Path
from typing import Any

import cbor2
from handoff_context import (
    Form,
    HandoffObject,
    Signer,
    StatusState,
    TrustStore,
    alg_for_key,
    check_identifier,
    continue_handoff,
    digest_text,
    handoff_digest,
    handoff_object,
    make_offer,
    make_status,
    new_key,
    parse_element,
    parse_object,
    public_jwk,
    status_object,
    strict_json_loads,
)
from handoff_context.errors import (
    ChainWindowError,
    HandoffError,
    KeyFileError,
    MalformedError,
    TrustConfigError,
)


def _usage_error(message: str) -> Exception:
    from app.cli.common import UsageError

    return UsageError(message)


def _slug(identifier: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", identifier).strip("-")[:80] or "key"


def add_keys(sub: Any) -> None:
    keys = sub.add_parser(
        "keys",
        help="make signing keys and trust files",
        description="Make signing keys and keep a trust file of public keys.",
    )
    ksub = keys.add_subparsers(dest="keys_command", required=True, metavar="ACTION")
    new = ksub.add_parser(
        "new",
        help="write a new private JWK and add its public key to a trust file",
        description="Generate a key for an agent identifier: the private JWK is written "
        "with mode 0600, the public JWK is added to the trust file (created if "
        "missing).",
    )
    new.add_argument(
        "--id",
        required=True,
        metavar="ID",
        help="the agent identifier the key speaks for, e.g. spiffe://a.example/agent/planner",
    )
    new.add_argument(
        "--alg",
        choices=["ES256", "Ed25519"],
        default="ES256",
        help="signature algorithm (default: ES256)",
    )
    new.add_argument("--kid", help="key identifier (default: derived from --id and a counter)")
    new.add_argument(
        "--trust",
        default="trust.json",
        metavar="TRUST.json",
        help="trust file to add the public key to (default: trust.json)",
    )
    new.add_argument(
        "--out", metavar="FILE", help="where to write the private JWK (default: keys/<id>.jwk)"
    )
    new.set_defaults(func=cmd_keys_new)


def cmd_keys_new(args: argparse.Namespace) -> int:
    try:
        ident = check_identifier(args.id, what="--id")
    except MalformedError as exc:
        raise _usage_error(exc.detail) from exc
    trust_path = Path(args.trust)
    doc: dict[str, Any] = {"issuers": []}
    if trust_path.exists():
        try:
            loaded = strict_json_loads(trust_path.read_bytes(), what=str(trust_path))
        except (OSError, MalformedError) as exc:
            raise _usage_error(f"cannot read trust file {trust_path}: {exc}") from exc
        if not isinstance(loaded, dict) or not isinstance(loaded.get("issuers"), list):
            raise _usage_error(f'{trust_path} is not a trust file ({{"issuers": [...]}})')
        doc = loaded
    entry = next((e for e in doc["issuers"] if isinstance(e, dict) and e.get("id") == ident), None)
    if entry is None:
        entry = {"id": ident, "keys": []}
        doc["issuers"].append(entry)
    kid = args.kid or f"{_slug(ident.rsplit('/', 1)[-1])}-{len(entry['keys']) + 1}"
    if any(k.get("kid") == kid for k in entry["keys"]):
        raise _usage_error(f"{ident} already has a key with kid {kid!r}")
    key = new_key(args.alg, kid=kid)
    entry["keys"].append(public_jwk(key))
    # Validate the whole result before writing anything (fail closed, profile §4).
    try:
        TrustStore.from_mapping(doc, source=str(trust_path))
    except TrustConfigError as exc:
        raise _usage_error(str(exc)) from exc
    out = Path(args.out) if args.out else Path("keys") / f"{_slug(ident)}.jwk"
    if out.exists():
        raise _usage_error(f"{out} exists; choose another --out")
    # One key file format for the CLI and the library (Signer.load reads it back).
    try:
        Signer(iss=ident, key=key, alg=alg_for_key(key)).save(out)
    except FileExistsError as exc:
        raise _usage_error(f"{out} exists; choose another --out") from exc
    except OSError as exc:
        raise _usage_error(f"cannot write {out}: {exc.strerror}") from exc
    trust_path.parent.mkdir(parents=True, exist_ok=True)
    trust_path.write_text(json.dumps(doc, indent=2) + "\n")
    print(f"wrote private key {out} (kid {kid}, {args.alg}); added public key to {trust_path}")
    return 0


def add_sign(sub: Any) -> None:
    sign = sub.add_parser(
        "sign",
        help="build signed offers and statuses",
        description="Build and sign handoff offers and statuses. Output is "
        "a handoff or status object (profile §1.4): JSON for the "
        "jws form, CBOR for the cose form.",
    )
    ssub = sign.add_subparsers(dest="sign_command", required=True, metavar="ELEMENT")

    offer = ssub.add_parser(
        "offer",
        help="sign an offer (optionally continuing a chain)",
        description="Sign an offer from --iss to --aud. With --after, the offer continues the "
        "handoff in that file: prev names its offer and the chain carries its "
        "chain plus its offer.",
    )
    _common(offer)
    offer.add_argument("--aud", required=True, metavar="ID", help="the delegate")
    offer.add_argument(
        "--dialog",
        metavar="ID",
        help="dialog identifier (A2A contextId); default: --after's dialog",
    )
    offer.add_argument("--task", metavar="ID", help="host task identifier")
    offer.add_argument("--obo", metavar="ID", help="principal the chain's root acted for")
    offer.add_argument(
        "--lifetime", type=int, default=120, metavar="SECONDS", help="exp - iat (default: 120)"
    )
    offer.add_argument(
        "--after", metavar="HANDOFF", help="handoff object file this offer continues"
    )
    offer.add_argument(
        "--no-chain",
        action="store_true",
        help="with --after: set prev but carry no chain (privacy, or continuing past the "
        "handoff's window: the next hop sees a partial chain; profile §7)",
    )
    offer.add_argument(
        "--ref",
        action="append",
        default=[],
        metavar="FILE",
        help="add a digest ref to FILE's content (repeatable)",
    )
    offer.set_defaults(func=cmd_sign_offer)

    status = ssub.add_parser(
        "status",
        help="sign a status answering an offer",
        description="Sign a status answering the offer in --offer. "
        "iss/aud follow profile §1.2 (the delegate answers; the "
        "delegator cancels).",
    )
    _common(status)
    status.add_argument(
        "--offer",
        required=True,
        metavar="HANDOFF",
        help="handoff object file holding the offer answered",
    )
    status.add_argument("--state", required=True, choices=[s.value for s in StatusState])
    status.add_argument("--reason", help="reason code (rejected/failed)")
    status.add_argument("--detail", help="free text for people")
    status.set_defaults(func=cmd_sign_status)


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--key", required=True, metavar="JWK", help="private JWK file (keys new)")
    p.add_argument("--iss", required=True, metavar="ID", help="the signer's identifier")
    p.add_argument("--iat", type=int, metavar="SECONDS", help="issue time (default: now)")
    p.add_argument(
        "--form",
        choices=["jws", "cose"],
        default="jws",
        help="jws (JSON) or cose (CBOR) (default: jws)",
    )
    p.add_argument("--out", metavar="FILE", help="write here instead of standard output")


def _signer(args: argparse.Namespace) -> Signer:
    try:
        return Signer.load(args.key, iss=args.iss)
    except KeyFileError as exc:
        raise _usage_error(str(exc)) from exc


def _read_handoff(path: str) -> HandoffObject:
    try:
        data = Path(path).read_bytes()
        value = (
            cbor2.loads(data)
            if data[:1] not in (b"{", b" ", b"\n")
            else strict_json_loads(data, what=path)
        )
        obj = parse_object(value)
    except (OSError, ValueError, HandoffError, cbor2.CBORDecodeError) as exc:
        raise _usage_error(f"cannot read handoff object {path}: {exc}") from exc
    if not isinstance(obj, HandoffObject):
        raise _usage_error(f"{path} holds a status object, not a handoff object")
    return obj


def _write(args: argparse.Namespace, obj: dict[str, Any], form: Form) -> None:
    data = (json.dumps(obj, indent=2) + "\n").encode() if form is Form.JWS else cbor2.dumps(obj)
    if args.out:
        Path(args.out).write_bytes(data)
    else:
        sys.stdout.buffer.write(data)


def cmd_sign_offer(args: argparse.Namespace) -> int:
    signer = _signer(args)
    form = Form(args.form)
    iat = args.iat if args.iat is not None else int(time.time())
    before = _read_handoff(args.after) if args.after else None
    if before is not None and before.form is not form:
        raise _usage_error(f"--after holds a {before.form} handoff; use --form {before.form}")
    if before is None and not args.dialog:
        raise _usage_error("--dialog is required (or --after a handoff to take it from)")
    refs = []
    for ref_file in args.ref:
        try:
            content = Path(ref_file).read_bytes()
        except OSError as exc:
            raise _usage_error(f"cannot read --ref {ref_file}: {exc.strerror}") from exc
        refs.append(
            {"kind": "digest", "digest": handoff_digest(content), "name": Path(ref_file).name}
        )
    fields: dict[str, Any] = {"lifetime": args.lifetime, "task": args.task, "obo": args.obo}
    try:
        if before is not None:
            obj = continue_handoff(
                signer,
                before,
                aud=args.aud,
                iat=iat,
                # --no-chain is the library's partial continuation: prev without the chain,
                # which may also continue past the received offer's window (profile §7).
                partial=args.no_chain,
                dialog=args.dialog,
                refs=refs,
                **fields,
            )
        else:
            octets = make_offer(
                signer, aud=args.aud, dialog=args.dialog, iat=iat, form=form, refs=refs, **fields
            )
            parse_element(octets, form)  # what we sign must be what we accept
            obj = handoff_object(octets, form=form)
    except ChainWindowError as exc:
        raise _usage_error(f"{exc.detail} (on the command line: --no-chain)") from exc
    except HandoffError as exc:
        raise _usage_error(exc.detail) from exc
    _write(args, obj, form)
    offer = obj["offer"]
    octets = offer.encode("ascii") if isinstance(offer, str) else offer
    print(
        f"signed offer {digest_text(handoff_digest(octets))} {signer.iss} -> {args.aud}",
        file=sys.stderr,
    )
    return 0


def cmd_sign_status(args: argparse.Namespace) -> int:
    signer = _signer(args)
    form = Form(args.form)
    offer = _read_handoff(args.offer)
    iat = args.iat if args.iat is not None else int(time.time())
    try:
        octets = make_status(
            signer,
            offer_octets=offer.offer,
            state=args.state,
            iat=iat,
            form=form,
            reason=args.reason,
            detail=args.detail,
        )
        parse_element(octets, form)
    except HandoffError as exc:
        raise _usage_error(exc.detail) from exc
    _write(args, status_object(octets), form)
    print(f"signed {args.state} status {digest_text(handoff_digest(octets))}", file=sys.stderr)
    return 0
