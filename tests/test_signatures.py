"""The signature step on every core (app.ingest.signatures): verifying ahead in threads
changes no verdict, byte for byte, and a signature that fails is still reported by the
in-order check exactly as a serial run reports it."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

import pytest
from handoff_context import (
    Form,
    Signer,
    TrustStore,
    Verifier,
    handoff_object,
    make_offer,
    parse_element,
    trust_document,
)

from app.ingest import signatures
from app.ingest.verifying import VerifyOptions, verify_inputs

T0 = 1_793_000_000


def capture() -> tuple[TrustStore, bytes]:
    """40 offers: most good, some forged (signed with a key the trust file does not hold
    for that issuer), some from an issuer the trust file does not know at all."""
    signers = [Signer.generate(f"spiffe://t.example/a{i}", "ES256") for i in range(4)]
    mallory = Signer.generate(signers[0].iss, "ES256")  # the same iss, another key
    stranger = Signer.generate("spiffe://t.example/stranger", "ES256")
    lines = []
    for i in range(40):
        by = mallory if i % 7 == 3 else stranger if i % 11 == 5 else signers[i % 4]
        offer = make_offer(by, aud=signers[(i + 1) % 4].iss, dialog=f"d{i}", iat=T0)
        lines.append(json.dumps({"received_at": T0 + 1, "payload": handoff_object(offer)}))
    return TrustStore.from_mapping(trust_document(signers)), "\n".join(lines).encode()


def verdicts(trust: TrustStore, data: bytes) -> list[dict[str, object]]:
    report = verify_inputs([("c.jsonl", data)], trust=trust, options=VerifyOptions(at=T0))
    return [v.to_json() for v in report.verdicts]


def test_verifying_ahead_changes_no_verdict(monkeypatch: pytest.MonkeyPatch) -> None:
    trust, data = capture()
    monkeypatch.setattr(signatures, "workers", lambda: 2)
    ahead = verdicts(trust, data)
    monkeypatch.setattr(signatures, "MIN_PARALLEL", 10**9)  # the serial path only
    serial = verdicts(trust, data)
    assert json.dumps(ahead) == json.dumps(serial)
    reasons = {v["reason"] for v in serial}
    assert reasons == {None, "bad-signature", "untrusted-key"}


def test_only_what_verifies_is_marked(monkeypatch: pytest.MonkeyPatch) -> None:
    trust, data = capture()
    monkeypatch.setattr(signatures, "workers", lambda: 2)
    elements = [
        e
        for line in data.splitlines()
        for e in signatures.elements_of(json.loads(line)["payload"], max_element=65536)
    ]
    cache = Verifier(trust=trust).signature_cache
    assert cache is not None
    assert signatures.submit_ahead(elements, trust, cache).collect(cache) == len(elements)
    marked = [e for e in elements if cache.verified(e.digest, trust.fingerprint)]
    serial_ok = []
    for e in elements:
        try:
            Verifier(trust=trust).check_signature(parse_element(e.octets, Form.JWS))
        except Exception:
            continue
        serial_ok.append(e)
    assert marked == serial_ok
    assert 0 < len(marked) < len(elements)


def test_a_forked_helper_changes_no_verdict_and_is_reaped(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The child verifies ahead of the parent (here: items one batch of 7 beyond the
    parent's batch); what it sends is only what verified, so the verdicts are the serial
    run's, and the child is reaped."""
    import app.ingest.verifying as verifying
    from app.ingest import forked
    from app.ingest.batches import batched

    trust, data = capture()
    serial = verdicts(trust, data)
    monkeypatch.setattr(forked, "idle_core", lambda: True)
    monkeypatch.setattr(forked, "MIN_OCTETS", 0)
    monkeypatch.setattr(forked, "AHEAD", 7)
    monkeypatch.setattr(verifying, "batched", lambda items: batched(items, 7))
    helpers: list[forked.Helper] = []
    real_stop = forked.Helper.stop

    def stop(self: forked.Helper) -> None:
        # The child has sent everything once its end of the pipe is closed: read it all.
        os.set_blocking(self.answers, True)
        cache = Verifier(trust=trust).signature_cache
        assert cache is not None
        self.before(10**6, cache)
        helpers.append(self)
        real_stop(self)

    real_before = forked.Helper.before

    def before(self: forked.Helper, position: int, cache: Any) -> int:
        if position == 0:  # the parent waits for a first answer: the child is ahead
            os.set_blocking(self.answers, True)
            self.buffer += os.read(self.answers, 32)
            os.set_blocking(self.answers, False)
        return real_before(self, position, cache)

    monkeypatch.setattr(forked.Helper, "stop", stop)
    monkeypatch.setattr(forked.Helper, "before", before)
    report = verify_inputs(
        [("c.jsonl", data)], trust=trust, options=VerifyOptions(at=T0), fork=True
    )
    assert json.dumps([v.to_json() for v in report.verdicts]) == json.dumps(serial)
    # Every item from the second batch on was the child's to verify, unless the parent was
    # there first; none it sent failed to verify (those are never sent).
    (helper,) = helpers
    accepted = sum(v["outcome"] == "accept" for v in serial)
    assert 0 < helper.marked <= accepted
    with pytest.raises(ChildProcessError):
        os.waitpid(helper.pid, os.WNOHANG)  # reaped: no zombie left behind


def test_a_forked_helper_that_dies_leaves_the_work_to_the_checks(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from app.ingest import forked

    trust, data = capture()
    serial = verdicts(trust, data)
    monkeypatch.setattr(forked, "idle_core", lambda: True)
    monkeypatch.setattr(forked, "MIN_OCTETS", 0)
    real_start = forked.Helper.start.__func__  # type: ignore[attr-defined]

    def start_and_kill(cls: type[forked.Helper], *args: object, **kw: object) -> object:
        helper = real_start(cls, *args, **kw)
        os.kill(helper.pid, signal.SIGKILL)
        return helper

    monkeypatch.setattr(forked.Helper, "start", classmethod(start_and_kill))
    report = verify_inputs(
        [("c.jsonl", data)], trust=trust, options=VerifyOptions(at=T0), fork=True
    )
    assert json.dumps([v.to_json() for v in report.verdicts]) == json.dumps(serial)


@pytest.mark.parametrize("jobs", [None, 2])
def test_a_forked_helper_is_stopped_when_the_parent_gets_less_than_a_core(
    monkeypatch: pytest.MonkeyPatch, jobs: int | None
) -> None:
    """With ``auto`` the parent measures its own share of a core while the child runs; a
    share below ``MIN_SHARE`` (here: each reading of the clock is 10 s after the last and
    the parent spent them all waiting for a core) means other work wants the cores, and the child
    is stopped. ``--jobs 2`` keeps it whatever the share. Verdicts are the same either way."""
    import itertools

    import app.ingest.verifying as verifying
    from app.ingest import forked
    from app.ingest.batches import batched

    trust, data = capture()
    serial = verdicts(trust, data)
    ticks, waits = itertools.count(step=10.0), itertools.count(step=10.0)
    monkeypatch.setattr(forked, "_clock", lambda: next(ticks))
    monkeypatch.setattr(forked, "_waited", lambda: next(waits))  # waiting all the time
    monkeypatch.setattr(forked, "idle_core", lambda: True)
    monkeypatch.setattr(forked, "MIN_OCTETS", 0)
    monkeypatch.setattr(verifying, "batched", lambda items: batched(items, 7))
    helpers: list[forked.Helper] = []
    real_stop = forked.Helper.stop

    def stop(self: forked.Helper) -> None:
        helpers.append(self)
        real_stop(self)

    monkeypatch.setattr(forked.Helper, "stop", stop)
    report = verify_inputs(
        [("c.jsonl", data)], trust=trust, options=VerifyOptions(at=T0), fork=True, jobs=jobs
    )
    assert json.dumps([v.to_json() for v in report.verdicts]) == json.dumps(serial)
    (helper,) = helpers
    assert helper.watch is (jobs is None)
    assert helper.stopped_early is (jobs is None)
    with pytest.raises(ChildProcessError):
        os.waitpid(helper.pid, os.WNOHANG)


@pytest.mark.parametrize(
    ("waited", "cpu", "starved"),
    [
        ((0.0, 0.0), (0.0, 0.0), False),  # no CPU used and no wait for a core: a disk wait
        ((0.0, 0.5), (0.0, 0.5), True),  # half the window waiting for a core
        ((0.0, 0.1), (0.0, 0.9), False),  # a tenth waiting: a share of 0.9
        ((None, None), (0.0, 0.5), True),  # no run delay from the kernel: the CPU share
        ((None, None), (0.0, 0.9), False),
    ],
)
def test_the_parent_is_starved_only_when_it_waits_for_a_core(
    monkeypatch: pytest.MonkeyPatch,
    waited: tuple[float | None, float | None],
    cpu: tuple[float, float],
    starved: bool,
) -> None:
    """The share of a core is one less the part of a window spent waiting for one (the
    kernel's run delay), so an ingest that waits for its commits keeps its helper; only
    where the kernel does not tell the delay is the CPU time used instead."""
    from app.ingest import forked

    readings = iter([(0.0, waited[0], cpu[0]), (1.0, waited[1], cpu[1])])
    monkeypatch.setattr(forked, "_readings", lambda: next(readings))
    helper = forked.Helper(pid=-1, answers=-1, shared=None, fingerprint="")  # type: ignore[arg-type]
    assert helper._starved() is starved


@pytest.mark.parametrize(
    ("text", "waited"),
    [
        (b"1234567 4500000000 89\n", 4.5),  # cpu time, run delay, slices: nanoseconds
        (b"1234567\n", None),  # a line without the delay
        (b"cpu delay slices\n", None),
        (None, None),  # no such file: the kernel does not tell
    ],
)
def test_the_run_delay_is_the_second_field_of_schedstat(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, text: bytes | None, waited: float | None
) -> None:
    from app.ingest import forked

    stat = tmp_path / "schedstat"
    if text is not None:
        stat.write_bytes(text)
    monkeypatch.setattr(forked, "_SCHEDSTAT", str(stat))
    assert forked._waited() == waited
