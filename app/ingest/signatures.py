"""The signature step on every core: signatures of a run of items verified ahead, in threads.

Signature verification is the one step of ``verify`` and ``ingest`` that does not depend on
order: whether an element's signature verifies under a trust store is a fact of its octets
(profile §6.1). So before a run of items is judged in input order, the signatures of its
elements (each item's element and its carried chain) that the signature cache does not hold
yet are verified in a thread pool, and the ones that verify are marked in that cache. The
in-order checks then find them there (``Verifier.check_signature``); a signature that does
not verify is not marked, and the in-order check verifies it again and reports the failure
exactly as it would have. Verdicts are therefore byte-identical to a serial run.

Threads, not processes: ``cryptography`` releases the GIL while OpenSSL verifies, and
threads share the parsed elements and the trust store's keys, which a process pool would
have to pickle (its keys cannot be) or rebuild. bench/lean_path.py measures both.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Collection, Iterable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

from handoff_context import (
    Element,
    HandoffObject,
    SignatureCache,
    StatusObject,
    TrustStore,
    parse_element,
    parse_object,
)
from handoff_context._signature import verify_element
from handoff_context.errors import HandoffError

# Fewer signatures than this are left to the in-order checks: handing them to threads
# costs more than it saves.
MIN_PARALLEL = 16
_CHUNK = 32  # signatures per task: amortises the hand-over, keeps every thread busy

_POOL: ThreadPoolExecutor | None = None
_POOL_GUARD = threading.Lock()


def workers() -> int:
    """Threads for the signature step: one per core this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


def _pool() -> ThreadPoolExecutor | None:
    """One pool for the process, made on first use; None on a single core."""
    global _POOL
    if workers() < 2:
        return None
    with _POOL_GUARD:
        if _POOL is None:
            _POOL = ThreadPoolExecutor(workers(), thread_name_prefix="signatures")
        return _POOL


def _forget_pool() -> None:
    # A forked child inherits the pool object but none of its threads: it makes its own.
    global _POOL
    _POOL = None


os.register_at_fork(after_in_child=_forget_pool)


def elements_of(value: object, *, max_element: int) -> list[Element]:
    """The elements a carried object holds that parse (its element, then its chain); what
    does not parse is left to the checks, which report it."""
    try:
        obj = parse_object(value, max_element=max_element)
    except HandoffError:
        return []
    return elements_in(obj)


def elements_in(obj: HandoffObject | StatusObject) -> list[Element]:
    octets = [obj.status] if isinstance(obj, StatusObject) else [obj.offer, *obj.chain]
    found = []
    for one in octets:
        with contextlib.suppress(HandoffError):
            found.append(parse_element(one, obj.form))
    return found


def _verifies(elements: Sequence[Element], trust: TrustStore) -> list[bytes]:
    ok = []
    for element in elements:
        try:
            verify_element(element, trust)
        except HandoffError:
            continue
        ok.append(element.digest)
    return ok


@dataclass
class Ahead:
    """Signatures being verified in the pool; ``collect`` marks those that verified."""

    futures: list[Future[list[bytes]]] = field(default_factory=list)
    fingerprint: str = ""
    sizes: list[int] = field(default_factory=list)  # signatures each future checks

    def collect(self, cache: SignatureCache) -> int:
        """Wait for the pool; mark what verified (in the calling thread, in order).
        Returns how many signatures the pool checked."""
        checked = 0
        for future, size in zip(self.futures, self.sizes, strict=True):
            for digest in future.result():
                cache.mark_verified(digest, self.fingerprint)
            checked += size
        return checked


def submit_ahead(elements: Iterable[Element], trust: TrustStore, cache: SignatureCache) -> Ahead:
    """Start verifying, in the pool, the signatures of ``elements`` the cache does not hold
    (nothing when there are too few to be worth it, or one core); ``collect`` the result
    before judging them. The caller may judge earlier items meanwhile: OpenSSL runs
    outside the GIL, so the pool's work overlaps the in-order checks."""
    fingerprint = trust.fingerprint
    ahead = Ahead(fingerprint=fingerprint)
    pool = _pool()
    if pool is None:
        return ahead  # one core: the in-order checks verify, and ``elements`` is not read
    todo: dict[bytes, Element] = {}
    for element in elements:
        if element.digest not in todo and not cache.verified(element.digest, fingerprint):
            todo[element.digest] = element
    if len(todo) < MIN_PARALLEL:
        return ahead
    pending = list(todo.values())
    for i in range(0, len(pending), _CHUNK):
        chunk = pending[i : i + _CHUNK]
        ahead.futures.append(pool.submit(_verifies, chunk, trust))
        ahead.sizes.append(len(chunk))
    return ahead


def verify_before(
    elements: Iterable[Element],
    trust: TrustStore,
    known: Callable[[list[bytes]], Collection[bytes]],
) -> list[bytes]:
    """Verify the signatures of ``elements`` before the batch's write transaction begins,
    so that writers verify side by side and only judging and writing wait for the write
    lock. ``known(digests)`` says which of ``digests`` verified before (the process's
    memory and the store's signature cache, read in a short read transaction of its own):
    those are not verified again (an element of a chain already stored costs nothing,
    bench/chain_cost.py). The rest are verified on every core when there are at least
    ``MIN_PARALLEL`` of them (fewer are left to the in-order checks, which hold the write
    lock only briefly for them) and the process may run on more than one core. Returns the
    digests that verified now, for the batch to record in the signature cache; a signature
    that does not verify is left to the in-order checks, which report it exactly as they
    would have."""
    todo: dict[bytes, Element] = {}
    for element in elements:
        todo.setdefault(element.digest, element)
    pool = _pool()
    if pool is None or len(todo) < MIN_PARALLEL:
        return []
    done = set(known(list(todo)))
    pending = [e for d, e in todo.items() if d not in done]
    if len(pending) < MIN_PARALLEL:
        return []
    chunks = [pending[i : i + _CHUNK] for i in range(0, len(pending), _CHUNK)]
    futures = [pool.submit(_verifies, chunk, trust) for chunk in chunks]
    return [digest for future in futures for digest in future.result()]
