"""Keys an agent can keep (issue 19 item 6): a signer is saved with mode 0600, never over an
existing key unless asked, and loaded again from the file or from an environment variable
holding the file's content or its path; errors name the file, never the key."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest
from handoff_context import (
    Context,
    KeyFileError,
    Outcome,
    Signer,
    TrustStore,
    Verifier,
    handoff_object,
    make_offer,
    trust_document,
)
from parties import T0

PLANNER = "spiffe://a.example/agent/planner"
CODER = "spiffe://b.example/agent/coder"


@pytest.mark.parametrize("alg", ["ES256", "Ed25519"])
def test_a_saved_signer_loads_and_signs_what_its_trust_entry_verifies(
    tmp_path: Path, alg: str
) -> None:
    signer = Signer.generate(PLANNER, alg, kid="p-1")
    path = signer.save(tmp_path / "keys" / "planner.jwk")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    loaded = Signer.load(path)
    assert (loaded.iss, loaded.alg, loaded.kid) == (PLANNER, alg, "p-1")
    assert loaded.public_jwk == signer.public_jwk and "d" not in loaded.public_jwk
    trust = TrustStore.from_mapping(trust_document([signer]))
    offer = make_offer(loaded, aud=CODER, dialog="ctx", iat=T0)
    verdict = Verifier(trust).verify_value(
        handoff_object(offer), Context(now=T0, receiver=CODER), source="t"
    )
    assert verdict.outcome is Outcome.ACCEPT, verdict.detail
    assert loaded.trust_entry() == {"id": PLANNER, "keys": [signer.public_jwk]}


def test_an_existing_key_is_never_replaced_unless_asked(tmp_path: Path) -> None:
    path = tmp_path / "k.jwk"
    first = Signer.generate(PLANNER, kid="one")
    first.save(path)
    with pytest.raises(FileExistsError):
        Signer.generate(PLANNER, kid="two").save(path)
    assert Signer.load(path).kid == "one"
    Signer.generate(PLANNER, kid="two").save(path, overwrite=True)
    assert Signer.load(path).kid == "two"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert [p.name for p in tmp_path.iterdir()] == ["k.jwk"]  # no temporary file left


def test_from_env_takes_the_content_or_a_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    signer = Signer.generate(CODER, "Ed25519", kid="c-1")
    path = signer.save(tmp_path / "coder.jwk")
    monkeypatch.setenv("HANDOFF_SIGNING_KEY", path.read_text())
    assert Signer.from_env().public_jwk == signer.public_jwk
    monkeypatch.setenv("AGENT_KEY", str(path))
    assert Signer.from_env("AGENT_KEY").iss == CODER


def test_a_key_file_without_its_agent_needs_iss(tmp_path: Path) -> None:
    """Key files written before they named their agent (a bare private JWK) still load."""
    signer = Signer.generate(CODER, kid="c-1")
    path = tmp_path / "bare.jwk"
    path.write_text(json.dumps(signer.key.as_dict(private=True)))
    with pytest.raises(KeyFileError, match="does not name its agent"):
        Signer.load(path)
    assert Signer.load(path, iss=CODER).iss == CODER
    named = signer.save(tmp_path / "named.jwk")
    with pytest.raises(KeyFileError, match="not of"):
        Signer.load(named, iss=PLANNER)
    assert Signer.load(named, iss=CODER).iss == CODER


@pytest.mark.parametrize(
    ("content", "match"),
    [
        (b"not json", "not a JSON key file"),
        (b"[1]", "not a JSON object"),
        (b'{"kty": "EC", "crv": "P-256", "x": "AA", "y": "AA", "iss": "a:b"}', "no private"),
        (b'{"kty": "RSA", "d": "AAAA", "iss": "a:b"}', "EC P-256 or OKP Ed25519"),
        (b'{"kty": "OKP", "crv": "Ed25519", "d": "AAAA", "iss": "a b"}', "agent identifier"),
        (b'{"kty": "OKP", "crv": "Ed25519", "d": "AAAA", "iss": 7}', "must be a string"),
    ],
)
def test_a_bad_key_file_says_what_is_wrong_without_quoting_it(
    tmp_path: Path, content: bytes, match: str
) -> None:
    path = tmp_path / "bad.jwk"
    path.write_bytes(content)
    with pytest.raises(KeyFileError, match=match) as caught:
        Signer.load(path)
    assert "AAAA" not in str(caught.value)
    # Nor in what a traceback would print of the exceptions behind it.
    assert caught.value.__cause__ is None or "AAAA" not in str(caught.value.__cause__)


def test_from_env_errors_never_quote_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HANDOFF_SIGNING_KEY", raising=False)
    with pytest.raises(KeyFileError, match="is not set"):
        Signer.from_env()
    secret = "c2VjcmV0LWtleS1tYXRlcmlhbA"
    monkeypatch.setenv("HANDOFF_SIGNING_KEY", secret)
    with pytest.raises(KeyFileError, match="names no readable file") as caught:
        Signer.from_env()
    assert secret not in str(caught.value)
    monkeypatch.setenv("HANDOFF_SIGNING_KEY", '{"kty": "OKP", "d": "' + secret + '"}')
    with pytest.raises(KeyFileError) as caught:
        Signer.from_env()
    assert secret not in str(caught.value)


def test_a_missing_file_is_a_key_file_error(tmp_path: Path) -> None:
    with pytest.raises(KeyFileError, match="cannot read key file"):
        Signer.load(tmp_path / "absent.jwk")
