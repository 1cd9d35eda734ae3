"""Trust sources (issue 21): rotation, revocation and outage drills against real loopback key
servers, and one named test per hostile source. The refresher is driven by explicit
``refresh()`` calls and a hand-moved clock: no sleep, no readiness wait."""

from __future__ import annotations

import json
import logging
import random
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from handoff_context import (
    Context,
    Outcome,
    Signer,
    TrustStore,
    Verifier,
    handoff_object,
    make_offer,
)
from handoff_context.errors import TrustConfigError
from handoff_context.sources import TrustConfig, TrustSources
from keyservers import Clock, KeyServer, agent_card, jwks, key_server, spiffe_bundle

T0 = 1_793_000_000
PLANNER = "spiffe://a.example/agent/planner"
ASSISTANT = "spiffe://a.example/agent/assistant"
CODER = "https://b.example/agents/coder"
RECEIVER = "spiffe://c.example/agent/tester"
HINT = 60


@pytest.fixture
def server() -> Iterator[KeyServer]:
    with key_server() as s:
        yield s


def verdict(trust: TrustStore, offer: bytes, *, now: int) -> tuple[str, str | None, str | None]:
    """Judge ``offer`` as received at ``now`` by a fresh receiver."""
    v = Verifier(trust=trust).verify_value(
        handoff_object(offer), Context(now=now, receiver=RECEIVER), source="test"
    )
    return v.outcome.value, None if v.reason is None else v.reason.value, v.detail


def offer(signer: Signer, iat: int) -> bytes:
    return make_offer(signer, aud=RECEIVER, dialog="d-1", iat=iat)


def live(doc: dict[str, Any], clock: Clock, **kwargs: Any) -> TrustSources:
    return TrustSources(TrustConfig.from_mapping(doc), clock=clock, rng=random.Random(7), **kwargs)


def jwks_source(server: KeyServer, **extra: Any) -> dict[str, Any]:
    return {
        "name": "planner-jwks",
        "kind": "jwks",
        "url": server.url("/planner/jwks.json"),
        "identifiers": [PLANNER],
        "refresh_seconds": HINT,
        **extra,
    }


def bundle_source(server: KeyServer) -> dict[str, Any]:
    return {
        "name": "a.example",
        "kind": "spiffe-bundle",
        "url": server.url("/a.example/bundle"),
        "trust_domain": "a.example",
    }


# --- drills -------------------------------------------------------------------------------


def test_rotation_drill(server: KeyServer) -> None:
    """A JWKS agent and a SPIFFE trust domain each publish a new key, then drop the old one:
    new offers are accepted after one refresh, without a new store; offers signed before the
    rotation still verify; a withdrawn key signs nothing new."""
    old, new = (
        Signer.generate(PLANNER, "ES256", kid="p1"),
        Signer.generate(PLANNER, "ES256", kid="p2"),
    )
    a_old = Signer.generate(ASSISTANT, "Ed25519", kid="a1")
    a_new = Signer.generate(ASSISTANT, "ES256", kid="a2")
    server.serve("/planner/jwks.json", jwks(old))
    server.serve("/a.example/bundle", spiffe_bundle(a_old, sequence=1, hint=HINT))
    clock = Clock(T0)
    trust = live({"sources": [jwks_source(server), bundle_source(server)]}, clock)
    receiver = Verifier(trust=trust)  # one receiver throughout: its memories must survive
    trust.refresh()
    before, a_before = offer(old, T0 + 5), offer(a_old, T0 + 5)
    for o in (before, a_before):
        v = receiver.verify_value(
            handoff_object(o), Context(now=T0 + 6, receiver=RECEIVER), source="x"
        )
        assert v.outcome is Outcome.ACCEPT, v.detail

    # Publish the new keys beside the old ones; within one refresh hint they are in use.
    server.serve("/planner/jwks.json", jwks(old, new))
    server.serve("/a.example/bundle", spiffe_bundle(a_old, a_new, sequence=2, hint=HINT))
    clock.advance(HINT)
    assert verdict(trust, offer(new, clock.now), now=clock.now)[1] == "bad-signature"  # not yet
    assert [s.name for s in trust.refresh()] == ["planner-jwks", "a.example"]
    for signer in (new, a_new):
        o = offer(signer, clock.now)
        v = receiver.verify_value(
            handoff_object(o), Context(now=clock.now, receiver=RECEIVER), source="x"
        )
        assert v.outcome is Outcome.ACCEPT, v.detail

    # Drop the old keys.
    server.serve("/planner/jwks.json", jwks(new))
    server.serve("/a.example/bundle", spiffe_bundle(a_new, sequence=3, hint=HINT))
    dropped_at = clock.advance(HINT)
    trust.refresh()
    assert {w.kid: w.stopped_at for w in trust.windows()} == {
        "p1": dropped_at,
        "p2": None,
        "a1": dropped_at,
        "a2": None,
    }
    # Old evidence, judged as received (a capture replayed, rederive): still verifies.
    assert verdict(trust, before, now=T0 + 6)[0] == "accept"
    assert verdict(trust, a_before, now=T0 + 6)[0] == "accept"
    # The receiver still remembers what it saw before the rotation: a retransmission.
    again = receiver.verify_value(
        handoff_object(before), Context(now=T0 + 7, receiver=RECEIVER), source="x"
    )
    assert again.outcome is Outcome.DUPLICATE
    # A new offer under a withdrawn key, issued after it went away (beyond the skew).
    late = clock.advance(120)
    outcome, reason, detail = verdict(trust, offer(old, late), now=late)
    assert (outcome, reason) == ("reject", "untrusted-key")
    assert detail is not None and "stopped being valid" in detail
    assert verdict(trust, offer(a_old, late), now=late)[1] == "untrusted-key"
    assert verdict(trust, offer(new, late), now=late)[0] == "accept"


def test_a_bundle_speaks_for_its_trust_domain_only(server: KeyServer) -> None:
    key = Signer.generate(ASSISTANT, "ES256", kid="a1")
    server.serve("/a.example/bundle", spiffe_bundle(key, sequence=1, hint=HINT))
    trust = live({"sources": [bundle_source(server)]}, Clock(T0))
    trust.refresh()
    assert verdict(trust, offer(key, T0), now=T0 + 1)[0] == "accept"
    for other in (
        "spiffe://b.example/agent/assistant",  # another trust domain
        "spiffe://a.example.evil/agent/assistant",  # a look-alike domain
        "spiffe://a.example",  # the trust domain itself names no workload
        "https://a.example/agent/assistant",  # not a SPIFFE ID
    ):
        impostor = Signer(iss=other, key=key.key, alg="ES256")
        assert verdict(trust, offer(impostor, T0), now=T0 + 1)[1] == "untrusted-key", other


def test_a_key_not_yet_fetched_is_untrusted_until_the_refresh(server: KeyServer) -> None:
    old, new = (
        Signer.generate(PLANNER, "ES256", kid="p1"),
        Signer.generate(PLANNER, "ES256", kid="p2"),
    )
    server.serve("/planner/jwks.json", jwks(old))
    clock = Clock(T0)
    trust = live({"sources": [jwks_source(server)]}, clock)
    trust.refresh()
    server.serve("/planner/jwks.json", jwks(old, new))
    clock.advance(10)
    assert trust.refresh() == []  # not due: nothing fetched before the hint
    assert verdict(trust, offer(new, clock.now), now=clock.now)[1] == "bad-signature"
    clock.advance(HINT)
    trust.refresh()
    assert verdict(trust, offer(new, clock.now), now=clock.now)[0] == "accept"


def test_revocation_drill(server: KeyServer) -> None:
    """Revoked at T: a new offer under the key is untrusted-key; one signed before T is not."""
    key = Signer.generate(PLANNER, "Ed25519", kid="p1")
    server.serve("/planner/jwks.json", jwks(key))
    clock = Clock(T0)
    events: list[Any] = []
    trust = live({"sources": [jwks_source(server)]}, clock, on_event=events.append)
    trust.refresh()
    before = offer(key, T0 + 10)
    revoked_at = T0 + 20
    fingerprint = trust.fingerprint
    trust.revoke(at=revoked_at, thumbprint=trust.windows()[0].thumbprint, reason="key leaked")
    assert trust.fingerprint != fingerprint  # verification caches keyed by it are not reused
    assert verdict(trust, before, now=T0 + 30)[0] == "accept"
    after = offer(key, revoked_at + 1)
    outcome, reason, detail = verdict(trust, after, now=revoked_at + 2)
    assert (outcome, reason) == ("reject", "untrusted-key")
    assert detail is not None and f"revoked at {revoked_at}" in detail
    assert [e.kind for e in events] == ["fetched", "revoked"]
    # The source still publishes the key: a refresh does not bring it back.
    clock.advance(HINT)
    trust.refresh()
    assert verdict(trust, offer(key, clock.now), now=clock.now)[1] == "untrusted-key"


def test_revocation_in_the_configuration_covers_a_listed_key() -> None:
    key = Signer.generate(PLANNER, "ES256", kid="p1")
    doc = {"issuers": [key.trust_entry()], "revoked": [{"kid": "p1", "at": T0 + 20}]}
    trust = live(doc, Clock(T0))
    assert verdict(trust, offer(key, T0 + 10), now=T0 + 30)[0] == "accept"
    assert verdict(trust, offer(key, T0 + 21), now=T0 + 30)[1] == "untrusted-key"


def test_outage_drill(server: KeyServer, caplog: pytest.LogCaptureFixture) -> None:
    """Down for ten refresh hints, then garbage: verdicts continue on the last good set, and
    the source says it is stale."""
    key = Signer.generate(PLANNER, "ES256", kid="p1")
    server.serve("/planner/jwks.json", jwks(key))
    clock = Clock(T0)
    trust = live({"sources": [jwks_source(server)]}, clock)
    (state,) = trust.refresh()
    assert not state.stale and state.last_success == T0
    server.down("/planner/jwks.json")
    caplog.set_level(logging.WARNING, logger="handoff_context.trust")
    fetches = len(server.hits)
    for _ in range(10):
        clock.advance(HINT)
        trust.refresh()
        assert verdict(trust, offer(key, clock.now), now=clock.now)[0] == "accept"
    assert len(server.hits) - fetches >= 10  # it kept trying, at least once a hint
    server.serve("/planner/jwks.json", b"<html>oops</html>")
    clock.advance(HINT)
    trust.refresh()
    assert verdict(trust, offer(key, clock.now), now=clock.now)[0] == "accept"
    (state,) = trust.status()
    assert state.stale and state.last_success == T0 and state.failures >= 11
    assert state.last_error is not None and "not a usable JSON document" in state.last_error
    assert "keeping the last good key set (1 keys" in caplog.text
    assert [w.stopped_at for w in trust.windows()] == [None]  # nothing was taken as a rotation
    server.serve("/planner/jwks.json", jwks(key))
    clock.advance(HINT)
    (state,) = trust.refresh()
    assert not state.stale and state.failures == 0


def test_backoff_is_jittered_and_bounded_by_the_hint(server: KeyServer) -> None:
    server.down("/planner/jwks.json")
    clock = Clock(T0)
    trust = live({"sources": [jwks_source(server)]}, clock)
    delays = []
    for _ in range(12):
        trust.refresh(force=True)
        (state,) = trust.status()
        delays.append(state.next_due - clock.now)
    assert all(1 <= d <= HINT for d in delays)
    assert delays[0] < delays[5]  # grows
    assert len(set(delays[-4:])) > 1  # jittered at the bound


def test_agent_card_source(server: KeyServer) -> None:
    org = Signer.generate("https://b.example", "ES256", kid="org-1")
    coder = Signer.generate(CODER, "Ed25519", kid="c1")
    server.serve("/card", agent_card(CODER, [coder], signer=org))
    doc = {"sources": [card_source(server, org)]}
    trust = live(doc, Clock(T0))
    (state,) = trust.refresh()
    assert state.last_error is None and state.keys[0][0] == "c1"
    assert verdict(trust, offer(coder, T0), now=T0 + 1)[0] == "accept"
    assert server.hits == ["/card"]  # the jku in the card's signature was not fetched


def card_source(server: KeyServer, org: Signer) -> dict[str, Any]:
    return {
        "name": "coder-card",
        "kind": "agent-card",
        "url": server.url("/card"),
        "identifiers": [CODER],
        "signers": [org.trust_entry()["keys"][0]],
    }


# --- hostile sources: refused, the last good set kept --------------------------------------


def refused_after_good(server: KeyServer, path: str, hostile: Any, doc: dict[str, Any]) -> str:
    """Serve a good set, then ``hostile``: the refusal's message, with the good set kept."""
    clock = Clock(T0)
    trust = live(doc, clock)
    (state,) = trust.refresh()
    assert state.last_error is None, state.last_error
    good = trust.fingerprint
    if isinstance(hostile, tuple):
        server.redirect(path, hostile[1])
    else:
        server.serve(path, hostile)
    clock.advance(3600)
    (state,) = trust.refresh()
    assert state.stale and trust.fingerprint == good
    assert [w.stopped_at for w in trust.windows()] == [None]
    assert state.last_error is not None
    return state.last_error


@pytest.fixture
def good_jwks(server: KeyServer) -> tuple[Signer, dict[str, Any]]:
    key = Signer.generate(PLANNER, "ES256", kid="p1")
    server.serve("/planner/jwks.json", jwks(key))
    return key, {"sources": [jwks_source(server)]}


def test_hostile_private_key_in_jwks(server: KeyServer, good_jwks: Any) -> None:
    key, doc = good_jwks
    private = {**key.key.as_dict(private=True), "kid": "p1"}
    error = refused_after_good(server, "/planner/jwks.json", {"keys": [private]}, doc)
    assert "private key material" in error


def test_hostile_duplicate_kids_with_different_keys(server: KeyServer, good_jwks: Any) -> None:
    key, doc = good_jwks
    other = Signer.generate(PLANNER, "ES256", kid="p1")
    error = refused_after_good(server, "/planner/jwks.json", jwks(key, other), doc)
    assert "kid 'p1' names two different keys" in error


@pytest.mark.parametrize(
    "change",
    [{"alg": "HS256"}, {"alg": "none"}, {"alg": "RS256"}, {"kty": "RSA", "n": "AQAB", "e": "AQAB"}],
)
def test_hostile_disallowed_algorithm(
    server: KeyServer, good_jwks: Any, change: dict[str, Any]
) -> None:
    key, doc = good_jwks
    bad = {**key.trust_entry()["keys"][0], **change}
    error = refused_after_good(server, "/planner/jwks.json", {"keys": [bad]}, doc)
    assert "does not fit" in error or "unsupported key" in error


def test_hostile_oversized_document(server: KeyServer, good_jwks: Any) -> None:
    key, doc = good_jwks
    huge = {**jwks(key), "padding": "x" * (256 * 1024)}
    error = refused_after_good(server, "/planner/jwks.json", huge, doc)
    assert "more than 262144 octets" in error


def test_hostile_deeply_nested_document(server: KeyServer, good_jwks: Any) -> None:
    _key, doc = good_jwks
    nested = b'{"keys": []' + b',"x":' + b"[" * 10_000 + b"]" * 10_000 + b"}"
    error = refused_after_good(server, "/planner/jwks.json", nested, doc)
    assert "nests deeper than 32 levels" in error


def test_hostile_lowered_spiffe_sequence(server: KeyServer) -> None:
    key = Signer.generate(ASSISTANT, "ES256", kid="a1")
    old = Signer.generate(ASSISTANT, "ES256", kid="a0")
    server.serve("/a.example/bundle", spiffe_bundle(key, sequence=5, hint=HINT))
    replayed = spiffe_bundle(old, key, sequence=4, hint=HINT)
    error = refused_after_good(
        server, "/a.example/bundle", replayed, {"sources": [bundle_source(server)]}
    )
    assert "spiffe_sequence went down from 5 to 4" in error


def test_hostile_agent_card_with_a_bad_signature(server: KeyServer) -> None:
    org = Signer.generate("https://b.example", "ES256", kid="org-1")
    coder = Signer.generate(CODER, "Ed25519", kid="c1")
    server.serve("/card", agent_card(CODER, [coder], signer=org))
    forged = agent_card(CODER, [coder], signer=org)
    forged["capabilities"]["extensions"][0]["params"]["keys"].append(
        Signer.generate(CODER, "Ed25519", kid="c2").trust_entry()["keys"][0]
    )  # a key added after signing
    error = refused_after_good(server, "/card", forged, {"sources": [card_source(server, org)]})
    assert "no card signature verifies" in error and "does not verify" in error
    impostor = Signer.generate("https://b.example", "ES256", kid="org-1")
    server.serve("/card", agent_card(CODER, [coder], signer=org))
    other = agent_card(CODER, [coder], signer=impostor)
    error = refused_after_good(server, "/card", other, {"sources": [card_source(server, org)]})
    assert "does not verify" in error


def test_hostile_agent_card_naming_another_agent(server: KeyServer) -> None:
    org = Signer.generate("https://b.example", "ES256", kid="org-1")
    coder = Signer.generate(CODER, "Ed25519", kid="c1")
    server.serve("/card", agent_card(CODER, [coder], signer=org))
    other = agent_card("https://b.example/agents/admin", [coder], signer=org)
    error = refused_after_good(server, "/card", other, {"sources": [card_source(server, org)]})
    assert "names agent 'https://b.example/agents/admin'" in error


def test_hostile_source_redirecting_elsewhere(server: KeyServer, good_jwks: Any) -> None:
    _key, doc = good_jwks
    with key_server() as elsewhere:
        elsewhere.serve("/jwks.json", jwks(Signer.generate(PLANNER, "ES256", kid="evil")))
        target = elsewhere.url("/jwks.json")
        error = refused_after_good(server, "/planner/jwks.json", ("redirect", target), doc)
        assert elsewhere.hits == []  # never fetched
    assert f"redirecting to {target!r}" in error


def test_hostile_source_that_trickles_is_cut_off(server: KeyServer, good_jwks: Any) -> None:
    """A real slow peer: a byte every 0.2 s would take minutes for one JWKS; the fetch gives
    up after its timeout in all (1 s here), not per byte."""
    key, doc = good_jwks
    doc["sources"][0]["timeout_seconds"] = 1
    clock = Clock(T0)
    trust = live(doc, clock)
    trust.refresh()
    server.trickle("/planner/jwks.json", jwks(key), every=0.2)
    clock.advance(HINT)
    (state,) = trust.refresh()
    assert state.stale and state.last_error is not None
    assert "took longer than 1 s" in state.last_error or "timed out" in state.last_error
    assert verdict(trust, offer(key, clock.now), now=clock.now)[0] == "accept"


# --- the configuration --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("entry", "words"),
    [
        ({"kind": "jwks", "url": "http://keys.example/jwks", "identifiers": [PLANNER]}, "https"),
        ({"kind": "jwks", "url": "file:///etc/keys", "identifiers": [PLANNER]}, "https"),
        ({"kind": "jwks", "url": "https://k.example/j"}, "identifiers"),
        ({"kind": "spiffe-bundle", "url": "https://k.example/b"}, "trust_domain"),
        (
            {"kind": "spiffe-bundle", "url": "https://k.example/b", "trust_domain": "A.Example"},
            "trust_domain",
        ),
        ({"kind": "agent-card", "url": "https://k.example/c", "identifiers": [CODER]}, "signers"),
        ({"kind": "x509", "url": "https://k.example/c"}, "kind must be one of"),
        (
            {
                "kind": "jwks",
                "url": "https://k.example/j",
                "identifiers": [PLANNER],
                "refresh_seconds": 0,
            },
            "refresh_seconds",
        ),
        (
            {"kind": "jwks", "url": "https://k.example/j", "identifiers": [PLANNER], "jku": "x"},
            "unknown member",
        ),
    ],
)
def test_bad_source_entries_are_refused(entry: dict[str, Any], words: str) -> None:
    with pytest.raises(TrustConfigError, match=words):
        TrustConfig.from_mapping({"sources": [entry]})


def test_nothing_to_verify_with_fails_closed() -> None:
    with pytest.raises(TrustConfigError, match="no issuer"):
        TrustConfig.from_mapping({"sources": [], "revoked": []})


def test_the_current_file_format_stays_valid(tmp_path: Path) -> None:
    key = Signer.generate(PLANNER, "ES256", kid="p1")
    path = tmp_path / "trust.json"
    path.write_text(json.dumps({"issuers": [key.trust_entry()]}))
    store = TrustStore.load(path)
    assert type(store) is TrustStore
    config = TrustConfig.load(str(path))
    assert TrustSources(config).fingerprint == store.fingerprint


def test_load_gives_a_live_store_for_a_configuration_with_sources(
    server: KeyServer, tmp_path: Path
) -> None:
    key = Signer.generate(PLANNER, "ES256", kid="p1")
    server.serve("/planner/jwks.json", jwks(key))
    path = tmp_path / "trust.json"
    path.write_text(json.dumps({"sources": [jwks_source(server)]}))
    store = TrustStore.load(path)
    assert isinstance(store, TrustSources) and PLANNER in store
    assert verdict(store, offer(key, T0), now=T0 + 1)[0] == "accept"


def test_background_refresher_fetches_and_stops(server: KeyServer) -> None:
    key = Signer.generate(PLANNER, "ES256", kid="p1")
    server.serve("/planner/jwks.json", jwks(key))
    fetched = threading.Event()
    trust = TrustSources(
        TrustConfig.from_mapping({"sources": [jwks_source(server)]}),
        on_event=lambda event: fetched.set() if event.kind == "fetched" else None,
    )
    assert PLANNER not in trust
    trust.start()
    try:
        assert fetched.wait(timeout=30)  # the event the thread signals, not a readiness sleep
    finally:
        trust.stop()
    assert PLANNER in trust and trust._thread is None
