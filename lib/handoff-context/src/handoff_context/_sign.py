"""The signing toolkit: build and sign offers, statuses, chains and handoff objects.

Tests, the demo generator and users who want to produce bundles all use this module, so
what it makes is exactly what the verifier expects (profile §1-§3).
"""

from __future__ import annotations

import json
import os
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from joserfc.jwk import ECKey, OKPKey

from handoff_context import _cose as cose
from handoff_context import _jws as jws
from handoff_context._encoding import b64url_encode, handoff_digest, strict_json_loads
from handoff_context._handoff import HandoffObject, parse_object
from handoff_context._memory import AnswerMemory
from handoff_context._model import (
    REASON_CODES,
    Form,
    Offer,
    StatusState,
    check_identifier,
    form_of,
    is_absolute_uri,
    status_parties,
)
from handoff_context.errors import (
    ChainWindowError,
    KeyFileError,
    MalformedError,
    Reason,
    ReplyError,
)

ALGS = ("ES256", "Ed25519")


def new_key(alg: str = "ES256", *, kid: str) -> Any:
    """Generate a private joserfc key for ``alg`` (ES256 -> P-256, Ed25519/EdDSA -> Ed25519)."""
    if alg == "ES256":
        return ECKey.generate_key("P-256", parameters={"kid": kid}, private=True)
    if alg in ("Ed25519", "EdDSA"):
        return OKPKey.generate_key("Ed25519", parameters={"kid": kid}, private=True)
    raise ValueError(f"unsupported alg {alg!r}; use ES256 or Ed25519")


def import_private_key(jwk: Mapping[str, Any]) -> Any:
    """Import a private JWK written by ``keys new``. Raises ValueError when it is not one."""
    if "d" not in jwk:
        raise ValueError("not a private key (no 'd' member)")
    if jwk.get("kty") == "EC" and jwk.get("crv") == "P-256":
        return ECKey.import_key(dict(jwk))
    if jwk.get("kty") == "OKP" and jwk.get("crv") == "Ed25519":
        return OKPKey.import_key(dict(jwk))
    raise ValueError("unsupported key: EC P-256 or OKP Ed25519 only")


def alg_for_key(key: Any) -> str:
    return "ES256" if isinstance(key, ECKey) else "Ed25519"


def public_jwk(key: Any) -> dict[str, Any]:
    """The public half as a JWK with its kid, ready for a trust file."""
    out: dict[str, Any] = dict(key.as_dict(private=False))
    return out


def new_hop() -> str:
    """A fresh hop identifier: 128 random bits, base64url (profile §1.1)."""
    return b64url_encode(secrets.token_bytes(16))


# The member of a key file that names the agent the key signs for (``Signer.iss``). A key
# file is a private JWK (what ``handoff-trace keys new`` writes) plus this member; files
# written before it existed load with the identifier given by the caller.
KEY_FILE_ISS = "iss"


@dataclass(frozen=True)
class Signer:
    """An agent that signs: its identifier, private key and algorithm."""

    iss: str
    key: Any
    alg: str = "ES256"

    @classmethod
    def generate(cls, iss: str, alg: str = "ES256", *, kid: str | None = None) -> Signer:
        """A new key for ``iss`` (ES256: P-256; Ed25519). Raises ValueError for another alg."""
        return cls(
            iss=iss, key=new_key(alg, kid=kid or f"{alg.lower()}-{secrets.token_hex(4)}"), alg=alg
        )

    @property
    def kid(self) -> str | None:
        kid = self.key.kid
        return None if kid is None else str(kid)

    @property
    def public_jwk(self) -> dict[str, Any]:
        """The public key as a JWK with its kid, for the trust configuration (profile §4)."""
        return public_jwk(self.key)

    def trust_entry(self) -> dict[str, Any]:
        """This agent's entry in a trust file: ``{"id": iss, "keys": [public JWK]}``."""
        return {"id": self.iss, "keys": [self.public_jwk]}

    def key_file(self) -> dict[str, Any]:
        """The key file's content: the private JWK plus the agent identifier."""
        content: dict[str, Any] = dict(self.key.as_dict(private=True))
        content[KEY_FILE_ISS] = self.iss
        return content

    def save(self, path: str | os.PathLike[str], *, overwrite: bool = False) -> Path:
        """Write the key file to ``path`` with mode 0600 (its folder is created if missing).

        Raises FileExistsError when ``path`` exists and ``overwrite`` is not set (an
        existing key is never replaced by accident), OSError when it cannot be written."""
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        data = (json.dumps(self.key_file(), indent=2) + "\n").encode("ascii")
        if not overwrite:
            _write_new(target, data)
            return target
        # Replace atomically: a reader never sees half a key, and the mode is 0600 from the
        # first byte on.
        temp = target.with_name(f".{target.name}.{secrets.token_hex(6)}.tmp")
        _write_new(temp, data)
        try:
            os.replace(temp, target)
        except BaseException:
            temp.unlink(missing_ok=True)
            raise
        return target

    @classmethod
    def load(cls, path: str | os.PathLike[str], *, iss: str | None = None) -> Signer:
        """Read a key file written by ``save`` or by ``handoff-trace keys new``.

        ``iss`` is needed for a key file that does not name its agent; for one that does,
        it must agree. Raises KeyFileError (never quoting the key)."""
        try:
            data = Path(path).read_bytes()
        except OSError as exc:
            raise KeyFileError(f"cannot read key file {path}: {exc.strerror}") from exc
        return cls.from_key_file(data, iss=iss, source=str(path))

    @classmethod
    def from_env(cls, var: str = "HANDOFF_SIGNING_KEY", *, iss: str | None = None) -> Signer:
        """The signer in environment variable ``var``: the key file's content (it starts with
        ``{``) or the path of a key file. Raises KeyFileError when the variable is unset or
        holds neither; the message never quotes the variable's value."""
        value = os.environ.get(var)
        if value is None or not value.strip():
            raise KeyFileError(f"${var} is not set (a key file's content or its path)")
        if value.lstrip().startswith("{"):
            return cls.from_key_file(value.encode("utf-8"), iss=iss, source=f"${var}")
        try:
            data = Path(value.strip()).read_bytes()
        except OSError as exc:
            raise KeyFileError(
                f"${var} holds no key file content and names no readable file ({exc.strerror})"
            ) from exc
        return cls.from_key_file(data, iss=iss, source=f"the file named by ${var}")

    @classmethod
    def from_key_file(cls, data: bytes, *, iss: str | None = None, source: str = "key") -> Signer:
        """Parse a key file's content. Raises KeyFileError."""
        try:
            content = strict_json_loads(data, what=source)
        except MalformedError:
            # Not chained: a traceback must not carry the parser's view of key material.
            raise KeyFileError(f"{source} is not a JSON key file") from None
        if not isinstance(content, dict):
            raise KeyFileError(f"{source} is not a JSON object (a private JWK)")
        named = content.pop(KEY_FILE_ISS, None)
        if named is not None and not isinstance(named, str):
            raise KeyFileError(f"{source}: {KEY_FILE_ISS!r} must be a string")
        if named is not None and iss is not None and named != iss:
            raise KeyFileError(f"{source} is the key of {named!r}, not of {iss!r}")
        ident = iss or named
        if ident is None:
            raise KeyFileError(f"{source} does not name its agent: pass iss=")
        try:
            check_identifier(ident, what="the agent identifier")
        except MalformedError as exc:
            raise KeyFileError(f"{source}: {exc.detail}") from exc
        if "d" not in content:
            raise KeyFileError(f"{source} holds no private key (no 'd' member)")
        try:
            key = import_private_key(content)
        except Exception as exc:  # the JOSE library's own errors: not quoted, they may echo
            raise KeyFileError(
                f"{source} is not an EC P-256 or OKP Ed25519 private JWK ({type(exc).__name__})"
            ) from None
        return cls(iss=ident, key=key, alg=alg_for_key(key))


def _write_new(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)


def trust_document(signers: Sequence[Signer]) -> dict[str, Any]:
    """A profile §4 trust file listing the public keys of ``signers``."""
    return {"issuers": [s.trust_entry() for s in signers]}


def _encode(value: Any, form: Form) -> Any:
    """Digests are bytes in the model; the JSON form carries them as base64url text."""
    if isinstance(value, bytes):
        return b64url_encode(value) if form is Form.JWS else value
    if isinstance(value, Mapping):
        return {k: _encode(v, form) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_encode(v, form) for v in value]
    return value


def sign_payload(
    payload: Mapping[str, Any], signer: Signer, form: Form = Form.JWS, *, with_kid: bool = True
) -> bytes:
    """Sign a payload map (digests as bytes) in ``form``; returns the element octets."""
    encoded = _encode(payload, form)
    kid = signer.kid if with_kid else None
    if form is Form.JWS:
        return jws.sign(encoded, key=signer.key, alg=signer.alg, kid=kid)
    return cose.sign(encoded, key=signer.key, alg=signer.alg, kid=kid)


def offer_payload(
    *,
    iss: str,
    aud: str,
    dialog: str,
    iat: int,
    exp: int | None = None,
    lifetime: int = 120,
    hop: str | None = None,
    task: str | None = None,
    obo: str | None = None,
    grant: bytes | None = None,
    prev: bytes | None = None,
    refs: Sequence[Mapping[str, Any]] = (),
    extra: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """An offer payload (profile §1.1); ``exp`` defaults to ``iat + lifetime``."""
    payload: dict[str, Any] = {
        "v": 1,
        "type": "offer",
        "hop": hop or new_hop(),
        "dialog": dialog,
        "iss": iss,
        "aud": aud,
        "iat": iat,
        "exp": iat + lifetime if exp is None else exp,
    }
    optional = {"task": task, "obo": obo, "grant": grant, "prev": prev}
    payload.update({k: v for k, v in optional.items() if v is not None})
    if refs:
        payload["refs"] = [dict(r) for r in refs]
    if extra:
        payload.update(extra)
    return payload


def make_offer(
    signer: Signer, *, aud: str, dialog: str, iat: int, form: Form = Form.JWS, **fields: Any
) -> bytes:
    """Sign an offer from ``signer`` to ``aud``. ``fields`` go to ``offer_payload``."""
    return sign_payload(
        offer_payload(iss=signer.iss, aud=aud, dialog=dialog, iat=iat, **fields), signer, form
    )


def status_payload(
    *,
    offer: Mapping[str, Any],
    offer_octets: bytes,
    state: StatusState | str,
    iat: int,
    iss: str | None = None,
    aud: str | None = None,
    reason: str | None = None,
    detail: str | None = None,
    refs: Sequence[Mapping[str, Any]] = (),
) -> dict[str, Any]:
    """A status payload answering ``offer`` (its decoded payload) with the profile §1.2 iss/aud
    swap by default: the delegate answers; the delegator cancels."""
    state = StatusState(state)
    default_iss, default_aud = status_parties(state, delegator=offer["iss"], delegate=offer["aud"])
    payload: dict[str, Any] = {
        "v": 1,
        "type": "status",
        "hop": offer["hop"],
        "offer": handoff_digest(offer_octets),
        "iss": iss or default_iss,
        "aud": aud or default_aud,
        "iat": iat,
        "state": state.value,
    }
    if reason is not None:
        payload["reason"] = reason
    if detail is not None:
        payload["detail"] = detail
    if refs:
        payload["refs"] = [dict(r) for r in refs]
    return payload


def make_status(
    signer: Signer,
    *,
    offer_octets: bytes,
    state: StatusState | str,
    iat: int,
    form: Form | None = None,
    answers: AnswerMemory | None = None,
    check: bool = True,
    **fields: Any,
) -> bytes:
    """Sign a status answering the offer ``offer_octets`` (in the offer's form by default).

    Only statuses this library's own verifier accepts are signed (profile §1.2, §6.8): the
    offer's delegate answers and only its delegator cancels, a ``reason`` goes only on
    ``rejected`` and ``failed`` and is never ``malformed`` (a local verdict) or
    ``equivocation`` (the second offer gets no status, profile §6.4). ``answers``, when
    given, records the signed octets as this offer's last answer, so a retransmitted offer
    can be answered with them again (``AnswerMemory.last_answer``). ``check=False`` signs
    whatever it is asked to, for test data that must hold what a careless or hostile agent
    sends; an agent never needs it. ``fields`` go to
    ``status_payload`` (``reason``, ``detail``, ``refs``; ``iss`` and ``aud`` only to
    repeat what the profile requires).

    Raises ReplyError when the status would be rejected or is forbidden (nothing is
    signed), MalformedError when ``offer_octets`` is not a readable offer, ValueError for
    an unknown ``state``.
    """
    from handoff_context._verify import parse_element

    state = StatusState(state)
    offer_form = form_of(offer_octets)
    element = parse_element(offer_octets, offer_form)
    if not isinstance(element.payload, Offer):
        raise MalformedError("make_status answers an offer, not a status")
    offer = element.payload
    iss = fields.pop("iss", None) or signer.iss
    if check:
        _check_reply(offer, state, iss=iss, aud=fields.get("aud"), reason=fields.get("reason"))
    payload = status_payload(
        offer=_decoded(offer), offer_octets=offer_octets, state=state, iat=iat, iss=iss, **fields
    )
    try:
        octets = sign_payload(payload, signer, form or offer_form)
        if check:
            parse_element(octets, form or offer_form)  # what we sign must be what we accept
    except MalformedError as exc:
        raise ReplyError(Reason.MALFORMED, f"the status would be malformed: {exc.detail}") from exc
    except UnicodeEncodeError as exc:  # a lone surrogate in detail cannot be encoded
        raise ReplyError(
            Reason.MALFORMED, "the status would be malformed: detail is not valid Unicode text"
        ) from exc
    if answers is not None:
        answers.record_answer(element.digest, octets)
    return octets


def _check_reply(
    offer: Offer, state: StatusState, *, iss: str, aud: str | None, reason: str | None
) -> None:
    """Refuse a status the verifier's ``parties`` check (profile §6.8) or the profile's
    rules on reasons (§1.2, §6) would reject."""
    want_iss, want_aud = status_parties(state, delegator=offer.iss, delegate=offer.aud)
    if iss != want_iss:
        who = "its delegator" if state.from_delegator else "its delegate"
        hint = (
            ""
            if state.from_delegator
            else "; an offer for another audience is refused in the host protocol, "
            "without a signed status (the verifier would flag one as policy)"
        )
        raise ReplyError(
            Reason.POLICY,
            f"a {state.value} status for hop {offer.hop} must come from {who} {want_iss!r}, "
            f"not {iss!r}{hint}",
        )
    if aud is not None and aud != want_aud:
        raise ReplyError(
            Reason.POLICY,
            f"a {state.value} status for hop {offer.hop} goes to {want_aud!r}, not {aud!r}",
        )
    if reason is None:
        return
    if state not in (StatusState.REJECTED, StatusState.FAILED):
        raise ReplyError(Reason.POLICY, f"a reason goes only on rejected and failed, not {state}")
    if reason == Reason.MALFORMED.value:
        raise ReplyError(
            Reason.POLICY,
            "malformed is a local verdict, never a status reason: refuse the message in the "
            "host protocol without a signed status",
        )
    if reason == Reason.EQUIVOCATION.value:
        raise ReplyError(
            Reason.POLICY,
            "an equivocating offer gets no status (profile §6.4): refuse it in the host "
            "protocol without a signed status",
        )
    if reason not in REASON_CODES and not is_absolute_uri(reason):
        raise ReplyError(
            Reason.POLICY, f"reason {reason!r} is neither a profile reason code nor an absolute URI"
        )


def _decoded(payload: Any) -> dict[str, Any]:
    return {"iss": payload.iss, "aud": payload.aud, "hop": payload.hop}


def make_chain(
    signers: Sequence[Signer],
    *,
    dialog: str,
    iat: int,
    step: int = 5,
    lifetime: int = 120,
    form: Form = Form.JWS,
    final_aud: str | None = None,
    **fields: Any,
) -> list[bytes]:
    """A linked chain: ``signers[i]`` hands to ``signers[i+1]`` (the last to ``final_aud``).

    Returns the offers oldest first; the last is the current offer and the rest its chain.
    """
    offers: list[bytes] = []
    for i, signer in enumerate(signers):
        aud = signers[i + 1].iss if i + 1 < len(signers) else final_aud
        if aud is None:
            raise ValueError("the last signer needs final_aud")
        prev = handoff_digest(offers[-1]) if offers else None
        offers.append(
            make_offer(
                signer,
                aud=aud,
                dialog=dialog,
                iat=iat + i * step,
                lifetime=lifetime,
                prev=prev,
                form=form,
                **fields,
            )
        )
    return offers


def handoff_object(
    offer: bytes,
    chain: Sequence[bytes] = (),
    *,
    form: Form | None = None,
    include_chain: bool = True,
) -> dict[str, Any]:
    """The profile §1.4 handoff object: JWS as strings, COSE as byte strings."""
    form = form or form_of(offer)
    obj: dict[str, Any] = {"offer": _carried(offer, form)}
    if include_chain and chain:
        obj["chain"] = [_carried(c, form) for c in chain]
    return obj


def _carried(octets: bytes, form: Form) -> str | bytes:
    return octets.decode("ascii") if form is Form.JWS else octets


def status_object(status: bytes) -> dict[str, Any]:
    """The profile §1.4 status object."""
    return {"status": _carried(status, form_of(status))}


def continue_handoff(
    signer: Signer,
    received: Mapping[str, Any] | HandoffObject,
    *,
    aud: str,
    iat: int,
    carry_chain: bool = True,
    partial: bool = False,
    skew: int = 0,
    dialog: str | None = None,
    form: Form | None = None,
    **fields: Any,
) -> dict[str, Any]:
    """Hand a received handoff on to ``aud``: a new offer from ``signer`` whose ``prev`` names
    the received offer, in a profile §1.4 handoff object whose chain is the received chain plus
    the received offer, oldest first (profile §7). With ``carry_chain=False`` the offer still
    names its predecessor but no chain is carried (the privacy choice of profile §7: the next
    receiver then reports the chain ``not-checked``).

    The received offer must still be live at ``iat`` (profile §7 timing: ``received.iat -
    skew <= iat <= received.exp + skew``), or the next hop rejects the new offer as
    ``broken-chain``; this function then raises ``ChainWindowError`` instead of signing.
    ``skew`` defaults to 0, the window every receiver accepts whatever its own skew; pass
    the receivers' skew (60 by default) to use their whole window. With ``partial=True``
    the offer names its predecessor in ``prev`` but carries no chain and the window is not
    checked: the next hop sees a partial chain (``not-checked``), while a party holding
    the earlier offer (a handoff-trace service) still judges the late link ``broken-chain``.

    ``received`` is the handoff object as found in the carrier (a map) or as parsed. Check it
    first (``Verifier``): this function links to it, it does not judge it. ``dialog``
    defaults to the received offer's; ``form`` must be the received handoff's (one chain, one
    form). ``fields`` go to ``offer_payload`` (``lifetime``, ``task``, ``obo``, ``refs``...).

    Raises ChainWindowError when the received offer is not live at ``iat`` (and ``partial``
    is not set); MalformedError when ``received`` is not a handoff object or its offer
    cannot be read, or when the new offer would not parse (what we sign must be what we
    accept); ValueError when ``form`` is not the received handoff's.
    """
    from handoff_context._verify import parse_element  # _verify imports this module

    before = received if isinstance(received, HandoffObject) else parse_object(received)
    if not isinstance(before, HandoffObject):
        raise MalformedError("a status object was received, not a handoff object")
    if form is not None and form is not before.form:
        raise ValueError(f"the received handoff is in the {before.form} form, not {form}")
    previous = parse_element(before.offer, before.form)
    if not isinstance(previous.payload, Offer):
        raise MalformedError("the received handoff's offer is a status")
    if not partial:
        _check_window(previous.payload, iat=iat, skew=skew)
    payload = offer_payload(
        iss=signer.iss,
        aud=aud,
        dialog=dialog or previous.payload.dialog,
        iat=iat,
        prev=previous.digest,
        **fields,
    )
    octets = sign_payload(payload, signer, before.form)
    parse_element(octets, before.form)
    chain = [*before.chain, before.offer] if carry_chain and not partial else []
    return handoff_object(octets, chain, form=before.form)


def _check_window(previous: Offer, *, iat: int, skew: int) -> None:
    """Profile §7 timing, judged by the delegating agent before it signs: the offer it
    continues must be live at the new offer's ``iat``."""
    if previous.iat - skew <= iat <= previous.exp + skew:
        return
    when = "after it expired" if iat > previous.exp + skew else "before it was issued"
    raise ChainWindowError(
        f"the offer being continued (hop {previous.hop}, live {previous.iat}..{previous.exp}, "
        f"skew {skew} s) is not live at {iat}, {when}; the next hop would reject the new "
        "offer as broken-chain. Either delegate within the received offer's window, or "
        "continue with partial=True: prev without the chain, which the next hop sees as a "
        "partial chain (a party holding the earlier offer still finds the late link)",
        received_exp=previous.exp,
        iat=iat,
    )
