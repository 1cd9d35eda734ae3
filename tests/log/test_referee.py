"""An outside referee agrees (issue 24, the first "Done when"): a Go program built here
with nothing but golang.org/x/mod/sumdb/note and sumdb/tlog verifies the checkpoint's
signature with the key ``handoff-trace log key`` prints, every tile against the signed
root, the consistency of a checkpoint taken before more ingest with one taken after, and
the inclusion of 1,000 randomly chosen stored elements of a demo store (their tlog-proof
files, proofs rebuilt from the tiles, and the entry bundles holding the leaf the referee
expects from the element's octets). Then one altered tile makes it fail.

The same elements' RFC 9942 receipts verify with the project's own COSE code and carry
the checkpoint's root; ``log verify`` agrees with the referee on the mirror.
"""

from __future__ import annotations

import os
import random
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.cli.root import main
from app.log.checkpoint import Checkpoint
from app.log.merkle import leaf_hash
from app.log.note import Verifier
from app.log.receipts import verify_receipt
from app.log.sequencer import sequence_all
from app.log.tiles import tiles_for
from tests.log.deployment import Deployment, deploy, digest_of, expected_leaf, ingest_run

REFEREE = Path(__file__).parent / "referee" / "main.go"
GOPATH = Path("/usr/share/gocode")
X_MOD = GOPATH / "src" / "golang.org" / "x" / "mod" / "sumdb" / "tlog"
NO_GO_ENV = "HANDOFF_TRACE_NO_GO"
SAMPLE = 1000


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    yield from deploy(tmp_path_factory.mktemp("referee"), dialogs=80)


@pytest.fixture(scope="module")
def go_referee(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The referee, built offline in GOPATH mode from Debian's x/mod."""
    go = shutil.which("go")
    if go is None or not X_MOD.is_dir():
        if os.environ.get(NO_GO_ENV) == "1":
            pytest.skip(f"Go or golang.org/x/mod not installed ({NO_GO_ENV}=1)")
        pytest.fail(
            "Go and golang.org/x/mod are needed: apt-get install -y golang-go "
            f"golang-golang-x-mod-dev (make test does), or set {NO_GO_ENV}=1 to skip",
            pytrace=False,
        )
    out = tmp_path_factory.mktemp("go") / "referee"
    subprocess.run(
        [go, "build", "-o", str(out), str(REFEREE)],
        check=True,
        env=_go_env(out.parent),
        capture_output=True,
        timeout=600,
    )
    return out


def _go_env(scratch: Path) -> dict[str, str]:
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": os.environ.get("HOME", str(scratch)),
        "GOCACHE": os.environ.get("GOCACHE", str(Path.home() / ".cache" / "go-build")),
        "GO111MODULE": "off",
        "GOPATH": str(GOPATH),
        "GOPROXY": "off",
        "GOFLAGS": "",
        "GOTOOLCHAIN": "local",
    }


def _printed_key(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, key_file: Path
) -> str:
    with monkeypatch.context() as m:
        m.setenv("HANDOFF_TRACE_LOG_KEY_FILE", str(key_file))
        assert main(["log", "key"]) == 0
    out = capsys.readouterr().out
    assert "PRIVATE" not in out
    return out.strip()


def _mirror(d: Deployment, into: Path) -> int:
    """Copy the served checkpoint and every tile of its tree into a directory."""
    note = d.get("/api/v1/log/checkpoint")
    (into / "checkpoint").parent.mkdir(parents=True, exist_ok=True)
    (into / "checkpoint").write_bytes(note)
    size = Checkpoint.parse_text(note.decode().split("\n\n")[0] + "\n").size
    for ref in tiles_for(size):
        path = into / ref.path()
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(d.get(f"/api/v1/log/{ref.path()}"))
    return size


def test_the_go_referee_verifies_the_log(
    deployment: Deployment,
    go_referee: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    d = deployment
    key_file = Path(d.url.removeprefix("sqlite:///")).parent / "log.key"
    vkey = _printed_key(capsys, monkeypatch, key_file)
    sequence_all(d.engine, d.signer, now=1)
    before = d.get("/api/v1/log/checkpoint")
    (tmp_path / "old-checkpoint").write_bytes(before)

    ingest_run(d.later, d.url)  # more ingest, then the log catches up
    sequence_all(d.engine, d.signer, now=2)
    mirror = tmp_path / "mirror"
    size = _mirror(d, mirror)
    old_size = int(before.decode().split("\n")[1])
    assert old_size < size

    rows = d.elements()
    assert len(rows) >= SAMPLE
    chosen = random.Random(24).sample(rows, SAMPLE)
    lines, receipts_root = [], set()
    verifier = Verifier.parse(vkey)
    latest = Checkpoint.parse_text(
        mirror.joinpath("checkpoint").read_text().split("\n\n")[0] + "\n"
    )
    for i, row in enumerate(chosen):
        proof = tmp_path / "proofs" / f"{i}.tlog-proof"
        proof.parent.mkdir(exist_ok=True)
        proof.write_bytes(d.get(f"/api/v1/elements/{digest_of(row)}/proof"))
        leaf = expected_leaf(row)
        lines.append(f"{proof} {leaf.hex()}\n")
        # Issue 24, second "Done when": the receipt, read with the project's COSE code.
        receipt = d.get(f"/api/v1/elements/{digest_of(row)}/proof", format="receipt")
        proved = verify_receipt(receipt, leaf_hash(leaf), verifier)
        receipts_root.add((proved.size, proved.root))
    assert receipts_root == {(latest.size, latest.root)}
    (tmp_path / "elements").write_text("".join(lines))

    args = [str(mirror), vkey, str(tmp_path / "old-checkpoint"), str(tmp_path / "elements")]
    done = subprocess.run([str(go_referee), *args], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert f"checkpoint: handoff-trace.test/log, {size} leaves, signature verified" in done.stdout
    assert f"consistency: {old_size} -> {size} verified" in done.stdout
    assert f"inclusion: {SAMPLE} elements verified" in done.stdout

    # `log verify` agrees, from the mirror and with the old checkpoint as its saved state.
    state = tmp_path / "state"
    state.write_bytes(before)
    element = digest_of(chosen[0])
    assert (
        main(
            [
                "log",
                "verify",
                str(mirror),
                "--key",
                vkey,
                "--state",
                str(state),
                "--element",
                element,
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert f"consistency: {old_size} -> {size}" in out and "FAIL" not in out

    # One changed hash in one tile, and the referee and `log verify` refuse.
    tile = mirror / "tile" / "0" / "000"
    data = bytearray(tile.read_bytes())
    data[40] ^= 1
    tile.write_bytes(bytes(data))
    done = subprocess.run([str(go_referee), *args], capture_output=True, text=True, timeout=600)
    assert done.returncode == 1 and done.stderr.startswith("FAIL: "), done.stderr
    assert main(["log", "verify", str(mirror), "--key", vkey]) == 1
    assert "FAIL  tile/0/000 does not match" in capsys.readouterr().out
