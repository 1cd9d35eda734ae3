"""One typed Settings object, read once at the edge (the CLI, the service's start-up).

Every value comes from the environment: ``DATABASE_URL`` as most tools spell it, the rest
under the ``HANDOFF_TRACE_`` prefix. Values are validated here, and unsafe ones are refused
with one clear line (``SettingsError``), before anything runs. The protocol core and the
store never see this object: they receive the plain values they need.
"""

from __future__ import annotations

import ipaddress
import os
import re
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path

from handoff_context import MAX_ELEMENT_OCTETS, Policy, RefPolicy, Timing

from app.envelope.config import EnvelopeConfig
from app.envelope.extract import DEFAULT_TYPES
from app.envelope.ledger import CaseRules
from app.errors import HandoffTraceError

PREFIX = "HANDOFF_TRACE_"
# The embedded default: a SQLite file beside the working directory, created on demand.
DEFAULT_DB_PATH = Path("var") / "handoff-trace.db"
# A day of skew or a week of offer lifetime is a misconfiguration, not a policy: either
# would make the freshness check (profile §6.3) and the replay window meaningless.
_MAX_SKEW = 3600
_MAX_LIFETIME = 7 * 24 * 3600
_MEDIA_TYPE = re.compile(r"[a-z0-9!#$&^_.+-]+/[a-z0-9!#$&^_.+-]+")
# A login that outlives a month outlives the person's reason to hold it.
_MAX_SESSION = 30 * 24 * 3600
_LOG_LEVELS = ("debug", "info", "warning", "error")
_LOG_FORMATS = ("auto", "json", "text")
# The profile's receiver defaults (skew, offer lifetime, chain length: profile §6.3, §7)
# and its flag timers are the library's, stated once there.
_POLICY = Policy()
_TIMING = Timing()
# The databases the store supports (``app.store.db.SCHEMES``; a test keeps the two equal:
# the settings are read before, and without, anything of the store).
DATABASE_SCHEMES = ("sqlite", "postgresql", "postgresql+psycopg")


class SettingsError(HandoffTraceError):
    """A setting is missing, malformed or unsafe; ``str(exc)`` is one line for people."""

    reason = "invalid-setting"


@dataclass(frozen=True, slots=True)
class Settings:
    """The deployment's configuration. Build it with ``Settings.from_env()``."""

    database_url: str | None = None  # None: the embedded SQLite file
    trust_file: Path | None = None
    lost_outcome_after: int = _TIMING.lost_outcome_after
    cancel_grace: int = _TIMING.cancel_grace
    skew: int = _POLICY.skew
    max_lifetime: int = _POLICY.max_lifetime
    max_chain: int = _POLICY.max_chain
    ref_policy: RefPolicy = RefPolicy.NONE
    max_request_bytes: int = 8 * 1024 * 1024
    max_element_bytes: int = MAX_ELEMENT_OCTETS
    # The service's sweep (profile §8 time rules) runs this often, and on each hops/flags query.
    sweep_seconds: int = 30
    # Envelope handoffs (docs/envelopes.md): the media types read as envelopes, how long a
    # handoff may wait for its acceptance, and how much inline text is a transcript dump.
    envelope_types: frozenset[str] = DEFAULT_TYPES
    accept_window: int = 3600
    transcript_bytes: int = 8192
    # Objects the receiver holds, for reference checks of envelopes (and of signed refs).
    objects_dir: Path | None = None
    # A dashboard login lasts this long; then the browser logs in again.
    session_seconds: int = 12 * 3600
    # Failed logins allowed per user name and per client address within the window, before
    # further attempts are refused (429) until the oldest failure leaves the window.
    login_failures_per_name: int = 5
    login_failures_per_address: int = 30
    login_window_seconds: int = 300
    # An upload report can be downloaded (from any instance) for this long.
    upload_report_seconds: int = 3600
    # ``serve``: where to listen, how many worker processes, and connections per process.
    host: str = "127.0.0.1"
    port: int = 8000
    workers: int = 1
    db_pool_size: int = 5
    # Proxies whose X-Forwarded-For and X-Forwarded-Proto are believed (comma-separated
    # addresses or networks, ``*`` for any); none by default, so a client cannot pick its
    # own address for the login limits by sending the header itself.
    forwarded_allow_ips: tuple[str, ...] = ()
    # Whether GET /api/v1/metrics needs a bearer token (any role). Off only where the
    # scraper's network is trusted.
    metrics_require_token: bool = True
    # Logs: level, and ``json`` lines, ``text``, or ``auto`` (JSON unless on a terminal).
    log_level: str = "info"
    log_format: str = "auto"
    # Webhook targets told about new and reopened flags (app/notify), and how often the
    # notifier looks for them and sends what is due.
    webhooks_file: Path | None = None
    webhook_seconds: int = 5
    # Whether a webhook target may be on a loopback, link-local, private or unspecified
    # address (a target inside the deployment's own network). Off: nobody who can edit the
    # targets file turns the notifier into a probe of the internal network or the cloud's
    # metadata service (issue #25).
    webhook_allow_private: bool = False
    # Seconds a client has to send a request's line and headers, from its first octet (or
    # the connection's opening); then the connection is closed (``app.cli.serve``).
    header_seconds: int = 10
    # Login through an OpenID Connect provider (app/web/oidc.py), beside local accounts:
    # the issuer, this service's client, the claim holding roles and how its values map.
    oidc_issuer: str | None = None
    oidc_client_id: str | None = None
    oidc_client_secret: str | None = None
    oidc_redirect_url: str | None = None
    oidc_role_claim: str = "roles"
    oidc_roles: tuple[tuple[str, str], ...] = ()
    # OpenTelemetry (app/otlp, docs/otlp.md): the OTLP/HTTP receiver hops are exported to
    # (base URL, as OTEL_EXPORTER_OTLP_ENDPOINT), its request headers (``k=v,k=v``, values
    # percent-decoded; never logged), how often the exporter looks for changed hops, and
    # the tracing tool's page of a trace (``{trace_id}``, ``{span_id}`` filled in).
    otlp_endpoint: str | None = None
    otlp_headers: tuple[tuple[str, str], ...] = ()
    otlp_seconds: int = 2
    trace_url: str | None = None
    # The evidence log (docs/evidence-log.md): the Ed25519 key file its checkpoints are
    # signed with (none: no log), how often the sequencer appends and publishes a
    # checkpoint, and how often the store checks itself against the log.
    log_key_file: Path | None = None
    log_seconds: int = 2
    log_check_seconds: int = 3600

    def __post_init__(self) -> None:
        if self.database_url is not None:
            check_database_url(self.database_url)
        _at_least("LOST_OUTCOME_AFTER", self.lost_outcome_after, 1)
        _at_least("CANCEL_GRACE", self.cancel_grace, 0)
        _at_least("SKEW", self.skew, 0)
        _at_most("SKEW", self.skew, _MAX_SKEW)
        _at_least("MAX_LIFETIME", self.max_lifetime, 1)
        _at_most("MAX_LIFETIME", self.max_lifetime, _MAX_LIFETIME)
        _at_least("MAX_CHAIN", self.max_chain, 1)
        _at_least("MAX_ELEMENT_BYTES", self.max_element_bytes, 1024)
        # Profile §1.2: an element over 64 KiB is malformed whatever the deployment says, so a
        # larger limit would only let bigger requests through to be refused later.
        _at_most("MAX_ELEMENT_BYTES", self.max_element_bytes, MAX_ELEMENT_OCTETS)
        if self.max_request_bytes < self.max_element_bytes:
            raise SettingsError(
                f"{PREFIX}MAX_REQUEST_BYTES ({self.max_request_bytes}) must be at least "
                f"{PREFIX}MAX_ELEMENT_BYTES ({self.max_element_bytes})"
            )
        _at_most("MAX_REQUEST_BYTES", self.max_request_bytes, 1024 * 1024 * 1024)
        _at_least("SWEEP_SECONDS", self.sweep_seconds, 1)
        _at_most("SWEEP_SECONDS", self.sweep_seconds, 3600)
        _at_least("ACCEPT_WINDOW", self.accept_window, 1)
        _at_least("TRANSCRIPT_BYTES", self.transcript_bytes, 1)
        if not self.envelope_types:
            raise SettingsError(f"{PREFIX}ENVELOPE_TYPES must name at least one media type")
        for media in self.envelope_types:
            if not _MEDIA_TYPE.fullmatch(media):
                raise SettingsError(
                    f"{PREFIX}ENVELOPE_TYPES: {media!r} is not a media type (type/subtype)"
                )
        _at_least("SESSION_SECONDS", self.session_seconds, 60)
        _at_most("SESSION_SECONDS", self.session_seconds, _MAX_SESSION)
        # A limit of thousands of guesses per window is no limit at all.
        _at_least("LOGIN_FAILURES_PER_NAME", self.login_failures_per_name, 1)
        _at_most("LOGIN_FAILURES_PER_NAME", self.login_failures_per_name, 100)
        _at_least("LOGIN_FAILURES_PER_ADDRESS", self.login_failures_per_address, 1)
        _at_most("LOGIN_FAILURES_PER_ADDRESS", self.login_failures_per_address, 1000)
        _at_least("LOGIN_WINDOW_SECONDS", self.login_window_seconds, 10)
        _at_most("LOGIN_WINDOW_SECONDS", self.login_window_seconds, 24 * 3600)
        _at_least("UPLOAD_REPORT_SECONDS", self.upload_report_seconds, 60)
        _at_least("PORT", self.port, 1)
        _at_most("PORT", self.port, 65535)
        _at_least("WORKERS", self.workers, 1)
        _at_most("WORKERS", self.workers, 64)
        _at_least("DB_POOL_SIZE", self.db_pool_size, 1)
        _at_most("DB_POOL_SIZE", self.db_pool_size, 100)
        for entry in self.forwarded_allow_ips:
            _check_proxy(entry)
        if self.log_level not in _LOG_LEVELS:
            raise SettingsError(
                f"{PREFIX}LOG_LEVEL must be one of {', '.join(_LOG_LEVELS)}, not {self.log_level!r}"
            )
        if self.log_format not in _LOG_FORMATS:
            raise SettingsError(
                f"{PREFIX}LOG_FORMAT must be one of {', '.join(_LOG_FORMATS)}, "
                f"not {self.log_format!r}"
            )
        _at_most("UPLOAD_REPORT_SECONDS", self.upload_report_seconds, 7 * 24 * 3600)
        if self.oidc_issuer is not None:
            _check_oidc(self)
        _at_least("WEBHOOK_SECONDS", self.webhook_seconds, 1)
        _at_least("HEADER_SECONDS", self.header_seconds, 1)
        _at_most("HEADER_SECONDS", self.header_seconds, 300)
        _at_most("WEBHOOK_SECONDS", self.webhook_seconds, 3600)
        check_otlp(self)
        _at_least("LOG_SECONDS", self.log_seconds, 1)
        _at_most("LOG_SECONDS", self.log_seconds, 60)
        _at_least("LOG_CHECK_SECONDS", self.log_check_seconds, 60)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        """Read the settings from ``environ`` (default: ``os.environ``).

        Empty values count as unset. Raises SettingsError for a malformed or unsafe value.
        """
        env = os.environ if environ is None else environ

        def get(name: str) -> str | None:
            value = env.get(name, "").strip()
            return value or None

        values: dict[str, object] = {}
        url = get("DATABASE_URL")
        if url is not None:
            values["database_url"] = url
        trust = get(PREFIX + "TRUST_FILE")
        if trust is not None:
            values["trust_file"] = Path(trust)
        policy = get(PREFIX + "REF_POLICY")
        if policy is not None:
            try:
                values["ref_policy"] = RefPolicy(policy)
            except ValueError:
                choices = ", ".join(p.value for p in RefPolicy)
                raise SettingsError(
                    f"{PREFIX}REF_POLICY must be one of {choices}, not {policy!r}"
                ) from None
        log_key = get(PREFIX + "LOG_KEY_FILE")
        if log_key is not None:
            values["log_key_file"] = Path(log_key)
        webhooks = get(PREFIX + "WEBHOOKS_FILE")
        if webhooks is not None:
            values["webhooks_file"] = Path(webhooks)
        for name in ("oidc_issuer", "oidc_client_id", "oidc_client_secret", "oidc_redirect_url"):
            text = get(PREFIX + name.upper())
            if text is not None:
                values[name] = text
        claim = get(PREFIX + "OIDC_ROLE_CLAIM")
        if claim is not None:
            values["oidc_role_claim"] = claim
        roles = get(PREFIX + "OIDC_ROLES")
        if roles is not None:
            values["oidc_roles"] = _role_map(roles)
        for name in ("otlp_endpoint", "trace_url"):
            text = get(PREFIX + name.upper())
            if text is not None:
                values[name] = text
        otlp_headers = get(PREFIX + "OTLP_HEADERS")
        if otlp_headers is not None:
            values["otlp_headers"] = _header_pairs(otlp_headers)
        objects = get(PREFIX + "OBJECTS_DIR")
        if objects is not None:
            values["objects_dir"] = Path(objects)
        types = get(PREFIX + "ENVELOPE_TYPES")
        if types is not None:
            values["envelope_types"] = frozenset(
                t.strip().lower() for t in types.split(",") if t.strip()
            )
        host = get(PREFIX + "HOST")
        if host is not None:
            values["host"] = host
        proxies = get(PREFIX + "FORWARDED_ALLOW_IPS")
        if proxies is not None:
            values["forwarded_allow_ips"] = tuple(
                p.strip() for p in proxies.split(",") if p.strip()
            )
        allow_private = get(PREFIX + "WEBHOOK_ALLOW_PRIVATE")
        if allow_private is not None:
            values["webhook_allow_private"] = _parse_bool(
                PREFIX + "WEBHOOK_ALLOW_PRIVATE", allow_private
            )
        needs_token = get(PREFIX + "METRICS_REQUIRE_TOKEN")
        if needs_token is not None:
            values["metrics_require_token"] = _parse_bool(
                PREFIX + "METRICS_REQUIRE_TOKEN", needs_token
            )
        for name in ("log_level", "log_format"):
            text = get(PREFIX + name.upper())
            if text is not None:
                values[name] = text.lower()
        for f in fields(cls):
            if f.type != "int":
                continue
            name = PREFIX + f.name.upper()
            text = get(name)
            if text is not None:
                values[f.name] = _parse_int(name, text)
        return cls(**values)

    def store_url(self, override: str | None = None) -> str:
        """The database the store is given: ``override`` (a command's ``--db``), else
        ``DATABASE_URL``, else the embedded SQLite file under the working directory."""
        if override:
            return override
        return self.database_url or default_store_url()

    @property
    def timing(self) -> Timing:
        """The lifecycle clock rules (profile §8) as the pure core takes them."""
        return Timing(
            skew=self.skew,
            lost_outcome_after=self.lost_outcome_after,
            cancel_grace=self.cancel_grace,
        )

    @property
    def envelope(self) -> EnvelopeConfig:
        """Envelope types and case rules as ingest and the sweep take them."""
        rules = CaseRules(accept_window=self.accept_window, transcript_bytes=self.transcript_bytes)
        return EnvelopeConfig(types=self.envelope_types, rules=rules)


def default_store_url() -> str:
    """The embedded SQLite file, relative to the working directory."""
    return f"sqlite:///{(Path.cwd() / DEFAULT_DB_PATH).as_posix()}"


_PERSON_ROLES = ("read", "operator", "admin")


def _role_map(text: str) -> tuple[tuple[str, str], ...]:
    """``group=role,group=role`` as pairs. Raises SettingsError."""
    pairs = []
    for part in (p.strip() for p in text.split(",") if p.strip()):
        value, _, role = part.rpartition("=")
        if not value or role not in _PERSON_ROLES:
            raise SettingsError(
                f"{PREFIX}OIDC_ROLES must be value=role pairs (roles: read, operator, admin), "
                f"not {part[:60]!r}"
            )
        pairs.append((value, role))
    return tuple(pairs)


def _check_oidc(s: Settings) -> None:
    """An identity provider needs a client id and at least one role mapping, and is spoken
    to over TLS (plain http only on loopback, for a provider on the same machine)."""
    issuer = s.oidc_issuer or ""
    loopback = re.match(r"^http://(127\.0\.0\.1|localhost|\[::1\])(:\d+)?(/|$)", issuer)
    if not (issuer.startswith("https://") or loopback):
        raise SettingsError(f"{PREFIX}OIDC_ISSUER must be an https:// URL, not {issuer[:60]!r}")
    if not s.oidc_client_id:
        raise SettingsError(f"{PREFIX}OIDC_CLIENT_ID is needed with {PREFIX}OIDC_ISSUER")
    if not s.oidc_roles:
        raise SettingsError(
            f"{PREFIX}OIDC_ROLES is needed with {PREFIX}OIDC_ISSUER (e.g. ops=operator)"
        )
    for _, role in s.oidc_roles:
        if role not in _PERSON_ROLES:
            raise SettingsError(f"{PREFIX}OIDC_ROLES: {role!r} is not read, operator or admin")


_HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")


def _header_pairs(text: str) -> tuple[tuple[str, str], ...]:
    """``name=value,name=value`` (OTEL_EXPORTER_OTLP_HEADERS' format; values
    percent-decoded) as pairs. Raises SettingsError without echoing a value (a token)."""
    pairs = []
    for part in (p.strip() for p in text.split(",") if p.strip()):
        name, sep, value = part.partition("=")
        name, value = name.strip(), urllib.parse.unquote(value.strip())
        if not sep or not _HEADER_NAME.fullmatch(name) or not value:
            raise SettingsError(
                f"{PREFIX}OTLP_HEADERS must be name=value pairs separated by commas "
                f"(entry {len(pairs) + 1} is not)"
            )
        if any(c in value for c in "\r\n\x00"):
            raise SettingsError(f"{PREFIX}OTLP_HEADERS: the value of {name} has a line break")
        pairs.append((name, value))
    return tuple(pairs)


def check_otlp(s: Settings) -> None:
    """The OTLP receiver and the trace page are http(s) URLs with no credentials inside
    (headers carry those, and URLs end up in logs); the page names the trace."""
    for name, url in (("OTLP_ENDPOINT", s.otlp_endpoint), ("TRACE_URL", s.trace_url)):
        if url is None:
            continue
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise SettingsError(f"{PREFIX}{name} must be an http:// or https:// URL")
        if parts.username or parts.password:
            raise SettingsError(f"{PREFIX}{name} must not hold credentials; use headers")
    if s.trace_url is not None and "{trace_id}" not in s.trace_url:
        raise SettingsError(f"{PREFIX}TRACE_URL must contain {{trace_id}}")
    _at_least("OTLP_SECONDS", s.otlp_seconds, 1)
    _at_most("OTLP_SECONDS", s.otlp_seconds, 3600)


def check_database_url(url: str) -> str:
    """Accept only the databases the store supports (as ``app.store.db.check_url`` does).
    Raises SettingsError."""
    scheme = url.split("://", 1)[0] if "://" in url else ""
    if scheme not in DATABASE_SCHEMES:
        raise SettingsError(
            "DATABASE_URL must start with sqlite:/// or postgresql+psycopg://, "
            f"not {scheme + '://' if scheme else repr(url[:20])}"
        )
    return url


def _parse_bool(name: str, text: str) -> bool:
    if text.lower() in ("1", "true", "yes", "on"):
        return True
    if text.lower() in ("0", "false", "no", "off"):
        return False
    raise SettingsError(f"{name} must be true or false, not {text!r}")


def _check_proxy(entry: str) -> None:
    """A trusted proxy: ``*``, an IP address or a network (CIDR)."""
    if entry == "*":
        return
    try:
        ipaddress.ip_network(entry, strict=False)
    except ValueError:
        raise SettingsError(
            f"{PREFIX}FORWARDED_ALLOW_IPS: {entry!r} is not an address, a network or *"
        ) from None


def _parse_int(name: str, text: str) -> int:
    try:
        return int(text, 10)
    except ValueError:
        raise SettingsError(f"{name} must be an integer, not {text!r}") from None


def _at_least(name: str, value: int, low: int) -> None:
    if value < low:
        raise SettingsError(f"{PREFIX}{name} must be at least {low}, not {value}")


def _at_most(name: str, value: int, high: int) -> None:
    if value > high:
        raise SettingsError(f"{PREFIX}{name} must be at most {high}, not {value}")
