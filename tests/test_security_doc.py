"""SECURITY.md cannot drift: every test it names exists (unless marked in progress), every
setting it names is one, and every limit setting is in its limits table."""

from __future__ import annotations

import ast
import re
from dataclasses import fields
from pathlib import Path

from app.settings import PREFIX, Settings

ROOT = Path(__file__).resolve().parents[1]
DOC = (ROOT / "SECURITY.md").read_text()
IN_PROGRESS = "*in progress:*"
# Settings that limit nothing an attacker sends (where data lives, the lifecycle's clocks,
# how often the sweep runs). A new setting goes in SECURITY.md's limits table or here.
NOT_LIMITS = {
    "database_url",
    "trust_file",
    "ref_policy",
    "sweep_seconds",
    # Notifications go out to operators' own targets; they limit nothing a client sends.
    # Nor does the OTLP export (docs/otlp.md), nor the tracing tool's link.
    "otlp_endpoint",
    "otlp_headers",
    "otlp_seconds",
    "trace_url",
    "webhooks_file",
    "webhook_seconds",
    # Login through an identity provider: who vouches for people, not a client limit.
    "oidc_issuer",
    "oidc_client_id",
    "oidc_client_secret",
    "oidc_redirect_url",
    "oidc_role_claim",
    "oidc_roles",
    "lost_outcome_after",
    "cancel_grace",
    # Envelope handoffs (docs/envelopes.md): what is read and flagged, not what is accepted.
    "envelope_types",
    "accept_window",
    "transcript_bytes",
    "objects_dir",
    # The evidence log (docs/evidence-log.md): its key and its schedule, not a client limit.
    "log_key_file",
    "log_seconds",
    "log_check_seconds",
    # Where and how the service runs, and what it says about itself.
    "host",
    "port",
    "workers",
    "db_pool_size",
    "log_level",
    "log_format",
    "upload_report_seconds",
}


def _named_tests() -> list[str]:
    """Every ``tests/...py`` (with an optional ``::name``) the doc cites as existing."""
    named = []
    for line in DOC.splitlines():
        checked = line.split(IN_PROGRESS, 1)[0]
        named += re.findall(r"`(tests/[\w/]+\.py(?:::\w+)?)`", checked)
    return named


def test_every_test_the_doc_names_exists() -> None:
    named = _named_tests()
    assert len(named) > 20
    for ref in named:
        path, _, name = ref.partition("::")
        file = ROOT / path
        assert file.is_file(), f"SECURITY.md names {path}, which does not exist"
        if name:
            functions = {
                node.name
                for node in ast.walk(ast.parse(file.read_text()))
                if isinstance(node, ast.FunctionDef)
            }
            assert name in functions, f"SECURITY.md names {ref}, which does not exist"


def test_the_settings_it_names_are_real_and_every_limit_is_there() -> None:
    settings = {PREFIX + f.name.upper() for f in fields(Settings)}
    named = set(re.findall(r"HANDOFF_TRACE_[A-Z_]+", DOC))
    assert named <= settings, named - settings
    limits = {PREFIX + f.name.upper() for f in fields(Settings) if f.name not in NOT_LIMITS}
    missing = {name for name in limits if name not in DOC}
    assert not missing, (
        f"SECURITY.md's limits table lacks {sorted(missing)}: add a row, or add the setting "
        "to NOT_LIMITS in tests/test_security_doc.py if it limits nothing a client sends"
    )
