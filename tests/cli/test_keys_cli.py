"""``handoff-trace keys new`` and the library read and write one key file format
(issue 19 item 6): a key the CLI wrote loads with ``Signer.load``, and a key the library
saved signs with ``handoff-trace sign``."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest
from handoff_context import Context, Outcome, Signer, TrustStore, Verifier, trust_document

from app.cli import main

PLANNER = "spiffe://example.org/agent/planner"
CODER = "spiffe://example.org/agent/coder"
IAT = 1_793_000_000


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("alg", ["ES256", "Ed25519"])
def test_a_key_the_cli_wrote_loads_in_the_library(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], alg: str
) -> None:
    monkeypatch.chdir(tmp_path)
    code, _, err = _run(capsys, "keys", "new", "--id", PLANNER, "--alg", alg, "--out", "p.jwk")
    assert code == 0, err
    assert stat.S_IMODE(Path("p.jwk").stat().st_mode) == 0o600
    signer = Signer.load("p.jwk")  # the file names its agent: no iss needed
    assert (signer.iss, signer.alg) == (PLANNER, alg)
    trust = json.loads(Path("trust.json").read_text())
    assert trust["issuers"] == [signer.trust_entry()]


def test_a_key_the_library_saved_signs_with_the_cli(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    signer = Signer.generate(PLANNER, "Ed25519", kid="p-lib")
    signer.save("planner.jwk")
    code, _, err = _run(
        capsys,
        "sign",
        "offer",
        "--key",
        "planner.jwk",
        "--iss",
        PLANNER,
        "--aud",
        CODER,
        "--dialog",
        "ctx-keys",
        "--iat",
        str(IAT),
        "--out",
        "hop.json",
    )
    assert code == 0, err
    verifier = Verifier(TrustStore.from_mapping(trust_document([signer])))
    verdict = verifier.verify_value(
        json.loads(Path("hop.json").read_text()),
        Context(now=IAT, receiver=CODER),
        source="hop.json",
    )
    assert verdict.outcome is Outcome.ACCEPT, verdict.detail


def test_the_cli_refuses_a_key_of_another_agent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    Signer.generate(PLANNER, kid="p-1").save("planner.jwk")
    code, _, err = _run(
        capsys,
        "sign",
        "offer",
        "--key",
        "planner.jwk",
        "--iss",
        CODER,
        "--aud",
        PLANNER,
        "--dialog",
        "ctx",
    )
    assert code == 2
    assert "is the key of" in err and '"d"' not in err


def test_a_late_continuation_is_refused_with_the_options(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``sign offer --after`` ten minutes after the handoff's offer was issued (a 120 s
    lifetime): refused with exit 2 and the ways on, instead of a chain the next hop would
    reject as broken-chain (docs/profile.md §7)."""
    monkeypatch.chdir(tmp_path)
    Signer.generate(PLANNER, kid="p-1").save("planner.jwk")
    Signer.generate(CODER, kid="c-1").save("coder.jwk")
    common = ["sign", "offer", "--lifetime", "120"]
    code, _, err = _run(
        capsys,
        *common,
        "--key",
        "planner.jwk",
        "--iss",
        PLANNER,
        "--aud",
        CODER,
        "--dialog",
        "ctx-late",
        "--iat",
        str(IAT),
        "--out",
        "hop1.json",
    )
    assert code == 0, err
    late = [*common, "--key", "coder.jwk", "--iss", CODER, "--aud", "spiffe://example.org/x"]
    code, _, err = _run(capsys, *late, "--after", "hop1.json", "--iat", str(IAT + 600))
    assert code == 2
    assert "broken-chain" in err and "--no-chain" in err
    assert not Path("hop2.json").exists()
    code, _, err = _run(
        capsys, *late, "--after", "hop1.json", "--iat", str(IAT + 60), "--out", "hop2.json"
    )
    assert code == 0, err
    # The way on the error names: prev without the chain, past the window.
    code, _, err = _run(
        capsys,
        *late,
        "--after",
        "hop1.json",
        "--no-chain",
        "--iat",
        str(IAT + 600),
        "--out",
        "hop3.json",
    )
    assert code == 0, err
    assert "chain" not in json.loads(Path("hop3.json").read_text())
