"""Settings: typed, read once from the environment, unsafe values refused in one line."""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path

import pytest
from handoff_context import RefPolicy, Timing

from app.settings import Settings, SettingsError


def test_defaults() -> None:
    s = Settings.from_env({})
    assert s == Settings()
    assert (s.database_url, s.trust_file) == (None, None)
    assert (s.lost_outcome_after, s.cancel_grace, s.skew) == (3600, 60, 60)
    assert (s.max_lifetime, s.max_chain, s.ref_policy) == (300, 16, RefPolicy.NONE)
    assert (s.max_request_bytes, s.max_element_bytes) == (8 * 1024 * 1024, 64 * 1024)
    assert s.timing == Timing(skew=60, lost_outcome_after=3600, cancel_grace=60)


def test_every_setting_from_the_environment() -> None:
    env = {
        "DATABASE_URL": "postgresql+psycopg://u@db/handoff",
        "HANDOFF_TRACE_TRUST_FILE": "/etc/handoff/trust.json",
        "HANDOFF_TRACE_LOST_OUTCOME_AFTER": "7200",
        "HANDOFF_TRACE_CANCEL_GRACE": "30",
        "HANDOFF_TRACE_SKEW": "10",
        "HANDOFF_TRACE_MAX_LIFETIME": "600",
        "HANDOFF_TRACE_MAX_CHAIN": "8",
        "HANDOFF_TRACE_REF_POLICY": "require",
        "HANDOFF_TRACE_MAX_REQUEST_BYTES": "1048576",
        "HANDOFF_TRACE_MAX_ELEMENT_BYTES": "32768",
        "HANDOFF_TRACE_SESSION_SECONDS": "3600",
        "HANDOFF_TRACE_LOGIN_FAILURES_PER_NAME": "3",
        "HANDOFF_TRACE_LOGIN_FAILURES_PER_ADDRESS": "20",
        "HANDOFF_TRACE_LOGIN_WINDOW_SECONDS": "600",
    }
    s = Settings.from_env(env)
    assert s.database_url == "postgresql+psycopg://u@db/handoff"
    assert s.trust_file == Path("/etc/handoff/trust.json")
    assert (s.lost_outcome_after, s.cancel_grace, s.skew, s.max_lifetime) == (7200, 30, 10, 600)
    assert (s.max_chain, s.ref_policy) == (8, RefPolicy.REQUIRE)
    assert (s.max_request_bytes, s.max_element_bytes) == (1048576, 32768)
    assert s.timing == Timing(skew=10, lost_outcome_after=7200, cancel_grace=30)
    assert (s.session_seconds, s.login_failures_per_name) == (3600, 3)
    assert (s.login_failures_per_address, s.login_window_seconds) == (20, 600)


def test_empty_values_count_as_unset() -> None:
    assert Settings.from_env({"DATABASE_URL": "", "HANDOFF_TRACE_SKEW": " "}) == Settings()


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("DATABASE_URL", "mysql://x/y", "DATABASE_URL must start with"),
        ("DATABASE_URL", "just-a-path.db", "DATABASE_URL must start with"),
        ("HANDOFF_TRACE_SKEW", "sixty", "HANDOFF_TRACE_SKEW must be an integer"),
        ("HANDOFF_TRACE_SKEW", "-1", "HANDOFF_TRACE_SKEW must be at least 0"),
        ("HANDOFF_TRACE_SKEW", "86400", "HANDOFF_TRACE_SKEW must be at most 3600"),
        ("HANDOFF_TRACE_LOST_OUTCOME_AFTER", "0", "must be at least 1"),
        ("HANDOFF_TRACE_CANCEL_GRACE", "-5", "must be at least 0"),
        ("HANDOFF_TRACE_MAX_LIFETIME", "99999999", "must be at most"),
        ("HANDOFF_TRACE_MAX_CHAIN", "0", "must be at least 1"),
        ("HANDOFF_TRACE_REF_POLICY", "maybe", "REF_POLICY must be one of"),
        ("HANDOFF_TRACE_MAX_ELEMENT_BYTES", "1000000", "MAX_ELEMENT_BYTES must be at most 65536"),
        ("HANDOFF_TRACE_MAX_REQUEST_BYTES", "1000", "must be at least HANDOFF_TRACE_MAX_ELEM"),
        ("HANDOFF_TRACE_SESSION_SECONDS", "0", "SESSION_SECONDS must be at least 60"),
        ("HANDOFF_TRACE_SESSION_SECONDS", "31536000", "SESSION_SECONDS must be at most"),
        ("HANDOFF_TRACE_LOGIN_FAILURES_PER_NAME", "0", "must be at least 1"),
        ("HANDOFF_TRACE_LOGIN_FAILURES_PER_NAME", "100000", "must be at most 100"),
        ("HANDOFF_TRACE_LOGIN_FAILURES_PER_ADDRESS", "5000", "must be at most 1000"),
        ("HANDOFF_TRACE_LOGIN_WINDOW_SECONDS", "1", "must be at least 10"),
    ],
)
def test_unsafe_or_malformed_values_are_refused(name: str, value: str, message: str) -> None:
    with pytest.raises(SettingsError, match=message) as info:
        Settings.from_env({name: value})
    assert "\n" not in str(info.value)


def test_envelope_settings() -> None:
    env = {
        "HANDOFF_TRACE_ENVELOPE_TYPES": " application/vnd.acme.handoff.v2+json , "
        "Application/VND.acme.handoff.v3+json",
        "HANDOFF_TRACE_ACCEPT_WINDOW": "600",
        "HANDOFF_TRACE_TRANSCRIPT_BYTES": "4096",
        "HANDOFF_TRACE_OBJECTS_DIR": "/srv/objects",
    }
    s = Settings.from_env(env)
    assert s.envelope.types == {
        "application/vnd.acme.handoff.v2+json",
        "application/vnd.acme.handoff.v3+json",
    }
    assert (s.envelope.rules.accept_window, s.envelope.rules.transcript_bytes) == (600, 4096)
    assert s.objects_dir == Path("/srv/objects")
    assert Settings().envelope.types == {"application/vnd.acme.handoff.v2+json"}


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("HANDOFF_TRACE_ENVELOPE_TYPES", " , ", "must name at least one media type"),
        ("HANDOFF_TRACE_ENVELOPE_TYPES", "handoff v2", "is not a media type"),
        ("HANDOFF_TRACE_ACCEPT_WINDOW", "0", "ACCEPT_WINDOW must be at least 1"),
        ("HANDOFF_TRACE_TRANSCRIPT_BYTES", "0", "TRANSCRIPT_BYTES must be at least 1"),
    ],
)
def test_bad_envelope_settings_are_refused(name: str, value: str, message: str) -> None:
    with pytest.raises(SettingsError, match=message):
        Settings.from_env({name: value})


def test_the_readme_documents_every_setting() -> None:
    """Docs cannot drift: every field of Settings is a row of the README's table."""
    readme = (Path(__file__).parents[2] / "README.md").read_text()
    for f in fields(Settings):
        name = "DATABASE_URL" if f.name == "database_url" else f"HANDOFF_TRACE_{f.name.upper()}"
        assert f"| `{name}` |" in readme, name


def test_the_instance_settings_are_read_and_checked() -> None:
    s = Settings.from_env(
        {
            "HANDOFF_TRACE_HOST": "0.0.0.0",
            "HANDOFF_TRACE_PORT": "9000",
            "HANDOFF_TRACE_WORKERS": "4",
            "HANDOFF_TRACE_DB_POOL_SIZE": "10",
            "HANDOFF_TRACE_METRICS_REQUIRE_TOKEN": "false",
            "HANDOFF_TRACE_LOG_LEVEL": "WARNING",
            "HANDOFF_TRACE_LOG_FORMAT": "text",
            "HANDOFF_TRACE_UPLOAD_REPORT_SECONDS": "600",
        }
    )
    assert (s.host, s.port, s.workers, s.db_pool_size) == ("0.0.0.0", 9000, 4, 10)
    assert (s.metrics_require_token, s.log_level, s.log_format) == (False, "warning", "text")
    assert s.upload_report_seconds == 600
    for name, bad in (
        ("HANDOFF_TRACE_PORT", "70000"),
        ("HANDOFF_TRACE_WORKERS", "0"),
        ("HANDOFF_TRACE_METRICS_REQUIRE_TOKEN", "maybe"),
        ("HANDOFF_TRACE_LOG_LEVEL", "loud"),
        ("HANDOFF_TRACE_LOG_FORMAT", "xml"),
        ("HANDOFF_TRACE_UPLOAD_REPORT_SECONDS", "5"),
    ):
        with pytest.raises(SettingsError, match=name.removeprefix("HANDOFF_TRACE_")):
            Settings.from_env({name: bad})


def test_the_settings_accept_exactly_the_databases_the_store_supports() -> None:
    # The settings are read before, and without, anything of the store: the list is stated
    # twice, and kept equal here.
    from app.settings import DATABASE_SCHEMES
    from app.store.db import SCHEMES, UnsupportedDatabase, check_url

    assert set(DATABASE_SCHEMES) == set(SCHEMES)
    for url in ("mysql://x/y", "just-a-path.db"):
        with pytest.raises(UnsupportedDatabase):
            check_url(url)
        with pytest.raises(SettingsError):
            Settings.from_env({"DATABASE_URL": url})


def test_the_profile_defaults_are_the_librarys_policy() -> None:
    from handoff_context import Policy

    from app.ingest.verifying import VerifyOptions

    policy, settings, options = Policy(), Settings(), VerifyOptions(at=0)
    for name in ("skew", "max_lifetime", "max_chain"):
        assert getattr(settings, name) == getattr(policy, name) == getattr(options, name)
    assert options.policy == policy
