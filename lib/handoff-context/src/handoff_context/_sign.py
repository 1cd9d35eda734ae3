"""The signing toolkit: build and sign offers, statuses, chains and handoff objects.

Tests, the demo generator and users who want to produce bundles all use this module, so
what it makes is exactly what the verifier expects (profile §1-§3).
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from joserfc.jwk import ECKey, OKPKey

from handoff_context import _cose as cose
from handoff_context import _jws as jws
from handoff_context._encoding import b64url_encode, handoff_digest
from handoff_context._handoff import HandoffObject, parse_object
from handoff_context._model import Form, Offer, StatusState, form_of, status_parties
from handoff_context.errors import MalformedError

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


@dataclass(frozen=True)
class Signer:
    """An agent that signs: its identifier, private key and algorithm."""

    iss: str
    key: Any
    alg: str = "ES256"

    @classmethod
    def generate(cls, iss: str, alg: str = "ES256", *, kid: str | None = None) -> Signer:
        return cls(
            iss=iss, key=new_key(alg, kid=kid or f"{alg.lower()}-{secrets.token_hex(4)}"), alg=alg
        )

    @property
    def kid(self) -> str | None:
        kid = self.key.kid
        return None if kid is None else str(kid)

    def trust_entry(self) -> dict[str, Any]:
        return {"id": self.iss, "keys": [public_jwk(self.key)]}


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
    **fields: Any,
) -> bytes:
    """Sign a status answering the offer ``offer_octets`` (in the offer's form by default)."""
    from handoff_context._verify import parse_element

    offer_form = form_of(offer_octets)
    element = parse_element(offer_octets, offer_form)
    payload = status_payload(
        offer=_decoded(element.payload),
        offer_octets=offer_octets,
        state=state,
        iat=iat,
        iss=fields.pop("iss", signer.iss),
        **fields,
    )
    return sign_payload(payload, signer, form or offer_form)


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
    dialog: str | None = None,
    form: Form | None = None,
    **fields: Any,
) -> dict[str, Any]:
    """Hand a received handoff on to ``aud``: a new offer from ``signer`` whose ``prev`` names
    the received offer, in a profile §1.4 handoff object whose chain is the received chain plus
    the received offer, oldest first (profile §7). With ``carry_chain=False`` the offer still
    names its predecessor but no chain is carried (the privacy choice of profile §7: the next
    receiver then reports the chain ``not-checked``).

    ``received`` is the handoff object as found in the carrier (a map) or as parsed. Check it
    first (``Verifier``): this function links to it, it does not judge it. ``dialog``
    defaults to the received offer's; ``form`` must be the received handoff's (one chain, one
    form). ``fields`` go to ``offer_payload`` (``lifetime``, ``task``, ``obo``, ``refs``...).

    Raises MalformedError when ``received`` is not a handoff object or its offer cannot be
    read, or when the new offer would not parse (what we sign must be what we accept);
    ValueError when ``form`` is not the received handoff's.
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
    chain = [*before.chain, before.offer] if carry_chain else []
    return handoff_object(octets, chain, form=before.form)
