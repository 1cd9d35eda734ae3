"""Every entry point judges alike (issue 15, item 6): the project's own vectors, the fuzz
regression vectors and the simulator's mixed capture, each sent through ``handoff-trace
verify``, ``POST /api/v1/verify``, ``POST /api/v1/ingest`` and the upload page (verify only
and stored), get the same verdicts everywhere.

Each vector runs on a fresh SQLite store (copied from one migrated template that already
holds the admin account, so no password is hashed per vector), with the vector's trust file,
its profile §12 policy as the service's settings and its objects as HANDOFF_TRACE_OBJECTS_DIR.
The receiver, the receive time and the dialog travel in profile §10 capture records, which the
upload page (it has no form fields for them) reads as every other entry point does; the CLI
and the API get them as parameters as well.
"""

from __future__ import annotations

import base64
import contextlib
import io
import json
import re
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import cbor2
import pytest
from handoff_context import RefPolicy
from handoff_context.vectors import stored_vectors

from app.cli import main as cli
from app.demo import DemoConfig, DemoPaths, write_demo
from fuzz import targets
from tests.databases import _migrate
from tests.web.accounts import create_accounts, log_in
from tests.web.conftest import Api, start

OWN = [p for p in stored_vectors() if json.loads(p.read_bytes())["trust"] == "trust.json"]
FUZZ = targets.FUZZ_VECTORS


def _b64u(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


FUZZ_INDEX = [e for e in json.loads((FUZZ / "index.json").read_bytes()) if e["target"] == "http"]


@dataclass
class Case:
    """One capture file and everything a receiver judges it with."""

    name: str
    data: bytes
    trust: Path
    objects: Path | None
    at: int
    receiver: str | None = None
    dialog: str | None = None
    policy: dict[str, Any] | None = None

    @property
    def settings(self) -> dict[str, Any]:
        values: dict[str, Any] = {"objects_dir": self.objects}
        if self.policy is not None:
            values.update(
                skew=self.policy["skew"],
                max_lifetime=self.policy["max_lifetime"],
                max_chain=self.policy["max_chain"],
                ref_policy=RefPolicy(self.policy["ref_policy"]),
            )
        return values

    @property
    def query(self) -> dict[str, Any]:
        params: dict[str, Any] = {"at": self.at, "receiver": self.receiver, "dialog": self.dialog}
        if self.policy is not None:
            params.update(self.policy)
        return {k: v for k, v in params.items() if v is not None}

    def cli_args(self) -> list[str]:
        names = {"max_lifetime": "--max-lifetime", "max_chain": "--max-chain"}
        args = ["verify", "--json", "--trust", str(self.trust)]
        for key, value in self.query.items():
            args += [names.get(key, "--" + key.replace("_", "-")), str(value)]
        if self.objects is not None:
            args += ["--objects", str(self.objects)]
        return args


def _records(doc: dict[str, Any]) -> bytes:
    """The vector's input as profile §10 capture records carrying its receiver, clock and
    dialog, in the vector's own format (JSON Lines or a CBOR sequence)."""
    facts = {"received_at": doc["at"], "received_by": doc["receiver"], "dialog": doc["dialog"]}
    if doc["input_format"] == "cbor":
        items = [cbor2.loads(_b64u(item)) for item in doc["input"]]
        return b"".join(cbor2.dumps({**facts, "payload": item}) for item in items)
    return "".join(json.dumps({**facts, "payload": item}) + "\n" for item in doc["input"]).encode()


def vector_case(path: Path, tmp: Path) -> Case:
    doc = json.loads(path.read_bytes())
    objects = None
    if doc["objects"]:
        objects = tmp / "objects"
        objects.mkdir()
        for o in doc["objects"]:
            (objects / o["name"]).write_bytes(_b64u(o["content"]))
            if "salt" in o:
                (objects / f"{o['name']}.salt").write_bytes(_b64u(o["salt"]))
    suffix = ".cbor" if doc["input_format"] == "cbor" else ".jsonl"
    return Case(
        name=doc["name"] + suffix,
        data=_records(doc),
        trust=path.parents[1] / "trust.json",
        objects=objects,
        at=doc["at"],
        receiver=doc["receiver"],
        dialog=doc["dialog"],
        policy=doc["policy"],
    )


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A migrated SQLite store holding the dashboard accounts."""
    path = tmp_path_factory.mktemp("entry-points") / "template.db"
    url = f"sqlite:///{path}"
    _migrate(url)
    from app.store.db import make_engine

    engine = make_engine(url)
    try:
        create_accounts(engine)
    finally:
        engine.dispose()
    return path


@contextlib.contextmanager
def service(template: Path, tmp: Path, case: Case) -> Iterator[Api]:
    db = tmp / f"store-{len(list(tmp.glob('store-*.db')))}.db"
    shutil.copyfile(template, db)
    apis = start(f"sqlite:///{db}", case.trust, **case.settings)
    api = next(apis)
    api.clock.now = case.at
    try:
        yield api
    finally:
        apis.close()


def through_cli(case: Case, tmp: Path) -> list[dict[str, Any]]:
    path = tmp / case.name
    path.write_bytes(case.data)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = cli([*case.cli_args(), str(path)])
    assert code in (0, 1), out.getvalue()[:300]
    return json.loads(out.getvalue())  # type: ignore[no-any-return]


def through_api(api: Api, route: str, case: Case) -> list[dict[str, Any]]:
    content_type = "application/cbor" if case.name.endswith(".cbor") else "application/x-ndjson"
    response = api.post(route, case.data, content_type=content_type, params=case.query)
    assert response.status_code == 200, response.text[:300]
    body = response.json()
    assert body.get("errors", []) == [], body["errors"]
    return body["verdicts"]  # type: ignore[no-any-return]


def through_upload(api: Api, case: Case, mode: str) -> list[dict[str, Any]]:
    login = log_in(api.engine, "ada")
    api.client.cookies.set("ht_session", login.cookie)
    files = {"file": (case.name, case.data, "application/octet-stream")}
    form = {"mode": mode, "csrf": login.csrf}
    response = api.client.post("/upload", data=form, files=files)
    assert response.status_code == 200, response.text[:300]
    link = re.search(r'href="(/upload/reports/[^"]+\.json)"', response.text)
    assert link, response.text[-2500:]
    report = api.client.get(link.group(1))
    assert report.status_code == 200, report.text[:300]
    body = report.json()
    assert body["errors"] == [], body["errors"]
    # The kept report numbers its verdicts (it may list only some of a large input's);
    # here it lists them all, in order. The number is the page's, not the verdict's.
    verdicts: list[dict[str, Any]] = body["verdicts"]
    assert body["left_out"] == 0 and [v.pop("item") for v in verdicts] == list(
        range(1, len(verdicts) + 1)
    )
    return verdicts


def judged(verdicts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A verdict without its source (each entry point names its input its own way)."""
    return [{k: v for k, v in verdict.items() if k != "source"} for verdict in verdicts]


def every_entry_point(template: Path, tmp: Path, case: Case) -> dict[str, list[dict[str, Any]]]:
    seen = {"cli verify": through_cli(case, tmp)}
    with service(template, tmp, case) as api:
        seen["POST /api/v1/verify"] = through_api(api, "/api/v1/verify", case)
        seen["upload, verify only"] = through_upload(api, case, "verify")
        seen["POST /api/v1/ingest"] = through_api(api, "/api/v1/ingest", case)
    with service(template, tmp, case) as api:
        seen["upload, stored"] = through_upload(api, case, "store")
    return {name: judged(verdicts) for name, verdicts in seen.items()}


STORED = ("POST /api/v1/ingest", "upload, stored")


def assert_alike(seen: dict[str, list[dict[str, Any]]]) -> None:
    """Identical verdicts within the entry points that store nothing and within those that
    store; between the two, identical but for what only a store can know (``_as_verify``)."""
    first, *rest = seen
    assert seen[first], "the capture holds at least one verdict"
    for name in rest:
        if name in STORED:
            assert seen[name] == seen[STORED[0]], f"{name} differs from {STORED[0]}"
            assert _as_verify(seen[name], seen[first]) == seen[first], f"{name} vs {first}"
        else:
            assert seen[name] == seen[first], f"{name} differs from {first}"


def _as_verify(stored: list[dict[str, Any]], verified: list[dict[str, Any]]) -> list[Any]:
    """The stored verdicts, with the chain that ingest built from offers the store holds
    (profile §7: an offer naming ``prev`` without a carried chain is checked against the earlier
    offers held; ``app.ingest.pipeline``) replaced by what verify, holding no store, says:
    not checked (not run, when an earlier check failed). Everything else must already be
    equal."""
    out = []
    for s, v in zip(stored, verified, strict=True):
        if s.get("chain") and not s["chain"]["carried"] and s["chain"] != v.get("chain"):
            chain_check = next(c for c in v["checks"] if c["check"] == "chain")
            assert chain_check["result"] in ("not-checked", "not-run"), chain_check
            checks = [chain_check if c["check"] == "chain" else c for c in s["checks"]]
            s = {**s, "chain": v["chain"], "checks": checks}
        out.append(s)
    return out


@pytest.mark.parametrize("path", OWN, ids=lambda p: p.stem)
def test_own_vectors_get_the_same_verdicts_everywhere(
    template: Path, tmp_path: Path, path: Path
) -> None:
    assert_alike(every_entry_point(template, tmp_path, vector_case(path, tmp_path)))


@pytest.mark.parametrize("entry", FUZZ_INDEX, ids=lambda e: e["name"])
def test_fuzz_vectors_get_the_same_verdicts_everywhere(
    template: Path, tmp_path: Path, entry: dict[str, Any]
) -> None:
    suffix = ".cbor" if "cbor" in entry["content_type"] else ".jsonl"
    case = Case(
        name=entry["name"] + suffix,
        data=(FUZZ / f"{entry['name']}.bin").read_bytes(),
        trust=targets.VECTORS / "trust.json",
        objects=None,
        at=targets.AT,
    )
    seen = every_entry_point(template, tmp_path, case)
    assert_alike(seen)
    outcome, reason = entry["expect"].split()[:2]
    assert [(v["outcome"], v["reason"]) for v in seen["cli verify"]] == [(outcome, reason)]


@pytest.mark.parametrize("part", ["jsonl", "cbor"])
def test_the_simulators_mixed_capture_gets_the_same_verdicts_everywhere(
    template: Path, tmp_path: Path, part: str
) -> None:
    paths = DemoPaths.beside(tmp_path / "run" / "capture.jsonl", trust=None, answers=None)
    paths.out.parent.mkdir()
    write_demo(DemoConfig(seed=7, dialogs=12, agents=6, fault_rate=0.3), paths)
    file = paths.out if part == "jsonl" else paths.cbor
    case = Case(
        name=file.name,
        data=file.read_bytes(),
        trust=paths.trust,
        objects=paths.objects,
        at=0,
        policy={"skew": 60, "max_lifetime": 300, "max_chain": 16, "ref_policy": "check-available"},
    )
    seen = every_entry_point(template, tmp_path, case)
    assert_alike(seen)
    outcomes = {v["outcome"] for v in seen["cli verify"]}
    assert "reject" in outcomes and "accept" in outcomes, "a mixed capture: faults and not"
