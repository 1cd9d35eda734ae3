"""A trusted key is held as the ``cryptography`` key that verifies, its RFC 7638 thumbprint
computed here: checking never loads joserfc (signing does). The thumbprint, the JWK and
the joserfc key given on request are joserfc's own for the same key material."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest
from handoff_context import Form, Signer, TrustStore, make_offer, public_jwk
from handoff_context._trust import import_key
from joserfc.jwk import ECKey, OKPKey


@pytest.mark.parametrize("alg", ["ES256", "Ed25519"])
def test_thumbprint_jwk_and_key_are_joserfc_s(alg: str) -> None:
    for n in range(20):
        signer = Signer.generate(f"spiffe://a.example/agent/{n}", alg=alg)
        jwk = public_jwk(signer.key)
        reference = (ECKey if alg == "ES256" else OKPKey).import_key(jwk)
        trusted = import_key(jwk, issuer=signer.iss, where="test")
        assert trusted.thumbprint == reference.thumbprint()
        assert trusted.jwk == reference.as_dict(private=False)
        assert trusted.key.as_dict(private=False) == reference.as_dict(private=False)
        assert trusted.key.thumbprint() == trusted.thumbprint


def test_keys_compare_by_their_material_not_their_objects() -> None:
    signer = Signer.generate("spiffe://a.example/agent/a", alg="ES256")
    jwk = public_jwk(signer.key)
    one, two = (import_key(jwk, issuer=signer.iss, where="test") for _ in range(2))
    assert one == two and hash(one) == hash(two)
    other = Signer.generate("spiffe://a.example/agent/a", alg="ES256", kid=signer.kid)
    assert import_key(public_jwk(other.key), issuer=signer.iss, where="test") != one


def test_checking_loads_no_joserfc(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Load a trust file, check a JWS and a COSE offer: joserfc and X.509 stay unloaded
    (this test fails when any module the checks import brings joserfc in again)."""
    signer = Signer.generate("spiffe://a.example/agent/a", alg="ES256")
    trust = tmp_path / "trust.json"
    trust.write_text(json.dumps({"issuers": [signer.trust_entry()]}))
    for form in Form:
        offer = make_offer(
            signer, aud="spiffe://a.example/agent/b", dialog="d-1", iat=1_700_000_000, form=form
        )
        (tmp_path / f"offer.{form.value}").write_bytes(offer)
    probe = textwrap.dedent(
        f"""
        import sys
        from pathlib import Path
        from handoff_context import TrustStore, form_of, parse_element
        from handoff_context._signature import verify_element
        trust = TrustStore.load({str(trust)!r})
        for path in sorted(Path({str(tmp_path)!r}).glob("offer.*")):
            octets = path.read_bytes()
            print(verify_element(parse_element(octets, form_of(octets)), trust).kid)
        print(sorted(m for m in sys.modules if m.startswith(("joserfc", "cryptography.x509"))))
        """
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [signer.kid, signer.kid, "[]"]
    key = TrustStore.load(trust).issuers[signer.iss][0]
    assert key.key.thumbprint() == key.thumbprint  # joserfc loaded on request
