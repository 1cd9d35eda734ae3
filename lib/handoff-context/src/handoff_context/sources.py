"""Keys that rotate without restarts (issue 21): trust sources, key history and revocation.

A trust configuration (``TrustConfig``) extends the profile §4 trust file with ``sources``
(JWKS URLs, SPIFFE bundle endpoints, signed A2A Agent Cards, each bound to the identifiers
or the SPIFFE trust domain it may speak for) and ``revoked`` keys. ``TrustSources`` is a
``TrustStore`` whose keys follow those sources: pass it wherever a ``TrustStore`` goes (a
``Verifier``, the a2a/mcp integrations) and its keys change under them, memories intact.

Refreshing: ``refresh()`` fetches every source that is due (each at its refresh hint; after
a failure, again after a jittered backoff bounded by the hint); ``start()`` runs it in a
background thread. A source that is down or answers something refused keeps its last good
key set, and says so: a log line (logger ``handoff_context.trust``), ``status()`` (stale),
and an event to ``on_event``.

The store is built from the key history, never from the last answer alone: a key gone from
its source still verifies what was signed while it was published (until ``stopped_at``
plus the skew); a revoked key verifies nothing signed after the revocation.
"""

from __future__ import annotations

import logging
import os
import random
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from handoff_context._encoding import strict_json_loads
from handoff_context._history import (
    InMemoryHistory,
    KeyHistoryStore,
    KeyWindow,
    MergePlan,
    Revocation,
    plan_merge,
)
from handoff_context._model import MAX_KID, check_identifier
from handoff_context._sources import (
    A2A_EXTENSION,
    Published,
    PublishedKey,
    SourceConfig,
    SourceError,
    SourceKind,
    check_source_url,
    fetch,
    jcs,
    judge,
)
from handoff_context._trust import (
    TrustedKey,
    TrustStore,
    fingerprint_of,
    import_key,
    read_trust_file,
)
from handoff_context.errors import MalformedError, TrustConfigError

__all__ = [
    "A2A_EXTENSION",
    "InMemoryHistory",
    "KeyHistoryStore",
    "KeyWindow",
    "MergePlan",
    "Published",
    "PublishedKey",
    "Revocation",
    "SourceConfig",
    "SourceError",
    "SourceKind",
    "SourceState",
    "TrustConfig",
    "TrustEvent",
    "TrustSources",
    "jcs",
    "plan_merge",
]

log = logging.getLogger("handoff_context.trust")

# Bounds on how often a source is fetched, whatever it or the configuration says.
MIN_REFRESH = 5
MAX_REFRESH = 86_400
_SOURCE_MEMBERS = frozenset(
    {
        "name",
        "kind",
        "url",
        "identifiers",
        "trust_domain",
        "refresh_seconds",
        "max_bytes",
        "timeout_seconds",
        "signers",
    }
)


# --- the configuration document -----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TrustConfig:
    """A trust configuration: listed issuers (the profile §4 file, unchanged), sources and
    revocations. Build it with ``load``, ``from_bytes`` or ``from_mapping``."""

    issuers: Mapping[str, tuple[TrustedKey, ...]]
    sources: tuple[SourceConfig, ...] = ()
    revoked: tuple[Revocation, ...] = ()

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> TrustConfig:
        """Read a trust file (the same checks as ``TrustStore.load``). Raises
        TrustConfigError."""
        return cls.from_bytes(read_trust_file(path), source=str(path))

    @classmethod
    def from_bytes(cls, data: bytes, *, source: str = "trust configuration") -> TrustConfig:
        try:
            doc = strict_json_loads(data, what=source)
        except MalformedError as exc:
            raise TrustConfigError(exc.detail) from exc
        return cls.from_mapping(doc, source=source)

    @classmethod
    def from_mapping(cls, doc: object, *, source: str = "trust configuration") -> TrustConfig:
        """Validate a decoded document. Raises TrustConfigError: a configuration that
        could verify nothing (no issuer and no source) fails closed."""
        if not isinstance(doc, Mapping):
            raise TrustConfigError(f"{source}: expected a JSON object")
        sources = _sources(doc.get("sources", []), source=source)
        listed = doc.get("issuers", [])
        if listed or not sources:
            issuers = TrustStore.from_mapping({"issuers": listed}, source=source).issuers
        else:
            issuers = {}
        revoked = _revocations(doc.get("revoked", []), source=source)
        return cls(issuers=issuers, sources=sources, revoked=revoked)


def _sources(entries: object, *, source: str) -> tuple[SourceConfig, ...]:
    if not isinstance(entries, list):
        raise TrustConfigError(f"{source}: sources must be a list")
    found: list[SourceConfig] = []
    for i, entry in enumerate(entries):
        config = _source(entry, where=f"{source}: sources[{i}]")
        if any(s.name == config.name for s in found):
            raise TrustConfigError(f"{source}: two sources are named {config.name!r}")
        found.append(config)
    return tuple(found)


def _source(entry: object, *, where: str) -> SourceConfig:
    if not isinstance(entry, Mapping):
        raise TrustConfigError(f"{where} must be an object")
    unknown = sorted(set(entry) - _SOURCE_MEMBERS)
    if unknown:
        raise TrustConfigError(f"{where}: unknown member(s) {', '.join(unknown)}")
    try:
        kind = SourceKind(entry.get("kind"))
    except ValueError:
        kinds = ", ".join(k.value for k in SourceKind)
        raise TrustConfigError(f"{where}: kind must be one of {kinds}") from None
    url = check_source_url(entry.get("url"), where=where)
    name = entry.get("name", url)
    if not isinstance(name, str) or not 0 < len(name) <= 200:
        raise TrustConfigError(f"{where}: name must be a string of 1 to 200 characters")
    refresh = _int(entry, "refresh_seconds", 300, MIN_REFRESH, MAX_REFRESH, where=where)
    max_bytes = _int(entry, "max_bytes", 256 * 1024, 1024, 16 * 1024 * 1024, where=where)
    timeout = float(_int(entry, "timeout_seconds", 10, 1, 120, where=where))
    common: dict[str, Any] = {
        "name": name,
        "kind": kind,
        "url": url,
        "refresh": refresh,
        "max_bytes": max_bytes,
        "timeout": timeout,
    }
    if kind is SourceKind.SPIFFE_BUNDLE:
        domain = entry.get("trust_domain")
        if "identifiers" in entry or not isinstance(domain, str) or not _domain_ok(domain):
            raise TrustConfigError(
                f"{where}: a spiffe-bundle source names its trust_domain (like a.example), "
                "and speaks for spiffe://<trust_domain>/... only"
            )
        return SourceConfig(trust_domain=domain, **common)
    identifiers = entry.get("identifiers")
    if "trust_domain" in entry or not isinstance(identifiers, list) or not identifiers:
        raise TrustConfigError(
            f"{where}: a {kind.value} source lists the identifiers it speaks for"
        )
    try:
        idents = tuple(check_identifier(x, what="identifier") for x in identifiers)
    except MalformedError as exc:
        raise TrustConfigError(f"{where}: {exc.detail}") from exc
    signers: tuple[TrustedKey, ...] = ()
    if kind is SourceKind.AGENT_CARD:
        keys = entry.get("signers")
        if not isinstance(keys, list) or not keys:
            raise TrustConfigError(
                f"{where}: an agent-card source lists the signers keys its card is signed with"
            )
        signers = tuple(
            import_key(k, issuer=name, where=f"{where}.signers[{j}]") for j, k in enumerate(keys)
        )
    elif "signers" in entry:
        raise TrustConfigError(f"{where}: signers belong to agent-card sources only")
    return SourceConfig(identifiers=idents, signers=signers, **common)


def _domain_ok(domain: str) -> bool:
    # SPIFFE-ID 2.1: lower-case letters, digits, dots, dashes and underscores.
    allowed = set("abcdefghijklmnopqrstuvwxyz0123456789.-_")
    return 0 < len(domain) <= 255 and set(domain) <= allowed


def _int(
    entry: Mapping[str, Any], name: str, default: int, low: int, high: int, *, where: str
) -> int:
    value = entry.get(name, default)
    if type(value) is not int or not low <= value <= high:
        raise TrustConfigError(f"{where}: {name} must be an integer from {low} to {high}")
    return value


def _revocations(entries: object, *, source: str) -> tuple[Revocation, ...]:
    if not isinstance(entries, list):
        raise TrustConfigError(f"{source}: revoked must be a list")
    found = []
    for i, entry in enumerate(entries):
        where = f"{source}: revoked[{i}]"
        if not isinstance(entry, Mapping):
            raise TrustConfigError(f"{where} must be an object")
        at = entry.get("at")
        if type(at) is not int or not 0 <= at < 2**53:
            raise TrustConfigError(f"{where}: at must be a NumericDate (seconds)")
        thumbprint, kid = entry.get("thumbprint"), entry.get("kid")
        if thumbprint is None and kid is None:
            raise TrustConfigError(f"{where} names the key by thumbprint or kid")
        try:
            if kid is not None:
                kid = check_identifier(kid, what="kid", limit=MAX_KID)
            if thumbprint is not None:
                thumbprint = check_identifier(thumbprint, what="thumbprint", limit=64)
        except MalformedError as exc:
            raise TrustConfigError(f"{where}: {exc.detail}") from exc
        reason = entry.get("reason", "")
        if not isinstance(reason, str):
            raise TrustConfigError(f"{where}: reason must be a string")
        found.append(Revocation(at=at, thumbprint=thumbprint, kid=kid, reason=reason[:500]))
    return tuple(found)


# --- what the refresher reports -----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TrustEvent:
    """Something the trust sources did, for an audit log: ``fetched`` (an accepted key set,
    ``keys`` its (kid, thumbprint) pairs), ``refused`` (an answer refused), ``unreachable``,
    ``revoked``."""

    kind: str
    source: str
    at: int
    detail: str
    keys: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class SourceState:
    """One source as the refresher last left it."""

    name: str
    kind: str
    url: str
    speaks_for: str  # the identifiers, or spiffe://<trust domain>/*
    refresh_hint: int
    next_due: int
    last_attempt: int | None = None
    last_success: int | None = None
    last_error: str | None = None
    failures: int = 0
    sequence: int | None = None
    keys: tuple[tuple[str, str], ...] = ()  # (kid, thumbprint) in its last good answer

    @property
    def stale(self) -> bool:
        """The key set in use is not what the source says now: never fetched, or the
        latest attempt failed (the last good set is kept)."""
        return self.last_success is None or self.last_error is not None


# --- the live store -------------------------------------------------------------------------


class TrustSources(TrustStore):
    """A ``TrustStore`` whose keys follow the configured sources and key history.

    ``issuers``, ``domains`` and ``fingerprint`` always read the latest snapshot, so a
    ``Verifier`` built with it (and its replay memory) keeps working across refreshes.
    ``clock`` (seconds) and ``rng`` make the schedule drivable in tests."""

    __setattr__ = object.__setattr__

    def __init__(
        self,
        config: TrustConfig,
        *,
        history: KeyHistoryStore | None = None,
        clock: Callable[[], float] = time.time,
        rng: random.Random | None = None,
        on_event: Callable[[TrustEvent], None] | None = None,
        on_change: Callable[[TrustStore, TrustStore], None] | None = None,
    ) -> None:
        self.config = config
        self.history: KeyHistoryStore = InMemoryHistory() if history is None else history
        self.clock = clock
        self.rng = rng if rng is not None else random.Random()
        self.on_event = on_event
        self.on_change = on_change
        self._lock = threading.RLock()
        self._refreshing = threading.Lock()
        self._imported: dict[tuple[str, str], TrustedKey] = {}
        now = int(clock())
        self._states = {
            s.name: SourceState(
                name=s.name,
                kind=s.kind.value,
                url=s.url,
                speaks_for=_speaks_for(s),
                refresh_hint=s.refresh,
                next_due=now,
            )
            for s in config.sources
        }
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._snapshot = self._build()

    # TrustStore's fields, read from the current snapshot.
    @property
    def issuers(self) -> Mapping[str, tuple[TrustedKey, ...]]:
        return self._snapshot.issuers

    @property
    def domains(self) -> Mapping[str, tuple[TrustedKey, ...]]:
        return self._snapshot.domains

    @property
    def fingerprint(self) -> str:
        return self._snapshot.fingerprint

    @property
    def snapshot(self) -> TrustStore:
        """The current keys as a plain, immutable ``TrustStore``."""
        return self._snapshot

    def __repr__(self) -> str:
        return f"TrustSources({len(self.config.sources)} sources, {self.fingerprint[:12]})"

    # -- refreshing ------------------------------------------------------------------------

    def status(self) -> list[SourceState]:
        with self._lock:
            return [self._states[s.name] for s in self.config.sources]

    def refresh(self, *, force: bool = False) -> list[SourceState]:
        """Fetch every source that is due (every source when ``force``d) and rebuild the
        keys from the history. Returns the states of the sources fetched. Never raises for a
        source's failure: it is logged, reported and retried after a backoff."""
        # One refresh at a time; ``_lock`` is held only to read and change the state, never
        # across a fetch, so ``status()`` (a trust page, a scrape) never waits on a source.
        with self._refreshing:
            now = int(self.clock())
            with self._lock:
                due = [
                    s for s in self.config.sources if force or self._states[s.name].next_due <= now
                ]
            for source in due:
                self._refresh_one(source, now)
            with self._lock:
                self._rebuild()
                return [self._states[s.name] for s in due]

    def sync(self) -> bool:
        """Rebuild the keys from the history without fetching (another instance sharing the
        history may have changed it). True when the keys changed."""
        with self._lock:
            return self._rebuild()

    def seconds_to_next(self) -> float:
        with self._lock:
            if not self._states:
                return float(MAX_REFRESH)
            soonest = min(s.next_due for s in self._states.values())
        return max(0.0, soonest - self.clock())

    def start(self) -> None:
        """Refresh in a background thread until ``stop()``."""
        with self._lock:
            if self._thread is not None:
                return
            self._stop.clear()
            self._thread = threading.Thread(
                target=self._run, name="handoff-trust-sources", daemon=True
            )
            self._thread.start()

    def stop(self) -> None:
        with self._lock:
            thread, self._thread = self._thread, None
        self._stop.set()
        if thread is not None:
            thread.join()

    def _run(self) -> None:
        while not self._stop.wait(timeout=self.seconds_to_next()):
            try:
                self.refresh()
            except Exception:  # a history store that failed: logged, tried again later
                log.exception("refreshing the trust sources failed")
                self._stop.wait(timeout=MIN_REFRESH)

    def _refresh_one(self, source: SourceConfig, now: int) -> None:
        state = self._states[source.name]  # only refresh() changes it, one at a time
        try:
            body = fetch(source)
            published = judge(source, body, last_sequence=state.sequence)
        except SourceError as exc:
            with self._lock:
                self._failed(source, state, now, exc.detail, refused=exc.refused)
            return
        plan = self.history.merge(source=source.name, fetched_at=now, keys=published.keys)
        with self._lock:
            self._succeeded(source, state, now, published, plan)

    def _succeeded(
        self,
        source: SourceConfig,
        state: SourceState,
        now: int,
        published: Published,
        plan: MergePlan,
    ) -> None:
        hint = min(MAX_REFRESH, max(MIN_REFRESH, published.refresh_hint or source.refresh))
        keys = tuple((k.kid, k.thumbprint) for k in published.keys)
        self._states[source.name] = replace(
            state,
            refresh_hint=hint,
            next_due=now + hint,
            last_attempt=now,
            last_success=now,
            last_error=None,
            failures=0,
            sequence=published.sequence if published.sequence is not None else state.sequence,
            keys=keys,
        )
        detail = f"{len(keys)} keys ({len(plan.opens)} new, {len(plan.closes)} gone)"
        log.info("trust source %s: fetched %s", source.name, detail)
        self._emit(TrustEvent("fetched", source.name, now, detail, keys))

    def _failed(
        self, source: SourceConfig, state: SourceState, now: int, detail: str, *, refused: bool
    ) -> None:
        failures = state.failures + 1
        # Jittered exponential backoff, never longer than the refresh hint.
        delay = min(state.refresh_hint, 2 ** min(failures, 16)) * (0.5 + self.rng.random() / 2)
        self._states[source.name] = replace(
            state,
            next_due=now + max(1, int(delay)),
            last_attempt=now,
            last_error=detail,
            failures=failures,
        )
        held = (
            "no key set yet"
            if state.last_success is None
            else (
                f"keeping the last good key set ({len(state.keys)} keys, fetched at "
                f"{state.last_success})"
            )
        )
        log.warning("trust source %s is stale: %s; %s", source.name, detail, held)
        self._emit(TrustEvent("refused" if refused else "unreachable", source.name, now, detail))

    def _emit(self, event: TrustEvent) -> None:
        if self.on_event is not None:
            self.on_event(event)

    # -- revocation ------------------------------------------------------------------------

    def revoke(
        self,
        *,
        at: int,
        thumbprint: str | None = None,
        kid: str | None = None,
        reason: str = "",
        by: str = "operator",
    ) -> Revocation:
        """Revoke a key (by thumbprint, or every key with ``kid``) from ``at`` on: new
        elements under it are ``untrusted-key``. Raises ValueError without a key named."""
        if thumbprint is None and kid is None:
            raise ValueError("name the key by thumbprint or kid")
        revocation = Revocation(at=at, thumbprint=thumbprint, kid=kid, reason=reason, by=by)
        with self._lock:
            if self.history.revoke(revocation):
                named = thumbprint or kid or ""
                detail = f"key {named} revoked from {at} by {by}" + (
                    f": {reason}" if reason else ""
                )
                log.warning("trust: %s", detail)
                self._emit(TrustEvent("revoked", "-", int(self.clock()), detail))
            self._rebuild()
        return revocation

    def revocations(self) -> list[Revocation]:
        return [*self.config.revoked, *self.history.revocations()]

    def windows(self) -> list[KeyWindow]:
        """The key history of the configured sources."""
        names = {s.name for s in self.config.sources}
        return sorted(
            (w for w in self.history.windows() if w.source in names),
            key=lambda w: (w.source, w.kid, w.generation),
        )

    # -- building the keys -------------------------------------------------------------------

    def _rebuild(self) -> bool:
        old = self._snapshot
        new = self._build()
        if new.fingerprint == old.fingerprint:
            return False
        self._snapshot = new
        if self.on_change is not None:
            self.on_change(old, new)
        return True

    def _build(self) -> TrustStore:
        revocations = self.revocations()

        def revoked_at(kid: str, thumbprint: str) -> int | None:
            times = [r.at for r in revocations if r.matches(kid, thumbprint)]
            return min(times) if times else None

        issuers: dict[str, tuple[TrustedKey, ...]] = {
            ident: tuple(replace(k, revoked_at=revoked_at(k.kid, k.thumbprint)) for k in keys)
            for ident, keys in self.config.issuers.items()
        }
        domains: dict[str, tuple[TrustedKey, ...]] = {}
        by_key: dict[tuple[str, str, str], list[KeyWindow]] = {}
        for w in self.history.windows():
            by_key.setdefault((w.source, w.kid, w.thumbprint), []).append(w)
        for source in self.config.sources:
            keys: list[TrustedKey] = []
            for (name, kid, thumbprint), windows in sorted(by_key.items()):
                if name != source.name:
                    continue
                ends = [w.stopped_at for w in windows]
                not_after = None if None in ends else max(e for e in ends if e is not None)
                key = self._import(windows[-1].jwk, source.name)
                keys.append(
                    replace(
                        key,
                        not_after=not_after,
                        revoked_at=revoked_at(kid, thumbprint),
                        source=source.name,
                    )
                )
            if not keys:
                continue
            if source.trust_domain is not None:
                domains[source.trust_domain] = domains.get(source.trust_domain, ()) + tuple(keys)
                continue
            for ident in source.identifiers:
                mine = tuple(replace(k, issuer=ident) for k in keys)
                issuers[ident] = issuers.get(ident, ()) + mine
        return TrustStore(
            issuers=issuers, fingerprint=fingerprint_of(issuers, domains), domains=domains
        )

    def _import(self, jwk: str, source: str) -> TrustedKey:
        # Importing costs about one verify: each history entry is imported once.
        cached = self._imported.get((source, jwk))
        if cached is None:
            doc = strict_json_loads(jwk.encode(), what="stored key")
            cached = import_key(doc, issuer=source, where=f"history of {source}")
            self._imported[(source, jwk)] = cached
        return cached


def _speaks_for(source: SourceConfig) -> str:
    if source.trust_domain is not None:
        return f"spiffe://{source.trust_domain}/*"
    return ", ".join(source.identifiers)
