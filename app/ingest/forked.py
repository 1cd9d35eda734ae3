"""The signature step on a second core, in a forked process (``verify`` on the command line).

``cryptography`` releases the GIL while OpenSSL verifies, but a thread of the pool in
``app.ingest.signatures`` needs it back after every call, and while ``verify`` judges the
previous batch in input order its main thread holds it: a pool thread then waits up to
the interpreter's switch interval (5 ms) per signature, and the second core stays mostly
idle (0.43 x raw verify with the pool against 0.41 x without, BENCHMARKS.md). A process
has a GIL of its own. ``verify`` holds its inputs in memory before it judges them, so a
child forked at the start has them too, for nothing: it reads the same capture the same
way (``read_capture``, so its items are the parent's, in the same order), verifies the
signatures of items ahead of the parent (each item's element and its carried chain) and
sends back only the SHA-256 digests of the elements whose signature verified. Before
each batch the parent marks whatever has arrived in its signature cache, and the in-order
checks find those there (``Verifier.check_signature``); what has not arrived they verify
themselves. As with the threads, a signature that does not verify is never sent, and the
in-order check reports its failure as a serial run does: verdicts are byte-identical with
or without the helper.

The child reads an element only as far as the signature check needs where it can
(``jws.signature_facts``: a JWS whose header it has met before; everything else it parses
in full): the parent's strict parse reads the same facts wherever it asks for the check.

The parent never waits for the child. It writes how far it has got (the index of the first
item of the batch it is about to judge) into a page both processes share, and the child
verifies only items at least one batch beyond that: an item the parent will reach before
the child could answer is skipped (read, not parsed). So the child always works ahead, and
the share of the work each does follows the load: when the child is slow (another process
has its core) the parent verifies more itself, and the child, reading only, catches up.
The pipe bounds how far ahead the child gets (a full pipe blocks it until the parent
reads). A child that ends early (killed, out of memory) only leaves the rest to the parent.

The second core has to be idle for this to pay. The load average is only a first gate; while
the child runs, the parent measures the share of a core it gets itself, and stops the child
when that share falls below ``MIN_SHARE`` (``verify --jobs 2`` keeps it, ``--jobs 1`` forks
none).

Fork is safe here because the ``verify`` command runs one thread. The HTTP API's ``verify``
runs inside a server with threads and does not use this module.
"""

from __future__ import annotations

import contextlib
import ctypes
import mmap
import os
import signal
import struct
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from handoff_context import (
    Form,
    SignatureCache,
    StatusObject,
    TrustStore,
    handoff_digest,
    parse_element,
    parse_object,
)
from handoff_context import _jws as jws
from handoff_context._signature import verify_element, verify_signed
from handoff_context.errors import HandoffError

from app.capture.carriers import CarrierError, ExtractStats, read_capture
from app.ingest.batches import BATCH_ITEMS
from app.ingest.signatures import workers

# Below this many octets of input the fork costs more than the second core gives back.
MIN_OCTETS = 256 * 1024
# The child verifies items at least this far beyond the first item of the parent's
# current batch: the parent reads the answers before each batch.
AHEAD = BATCH_ITEMS
_POSITION = struct.Struct("q")  # the parent's position, at the start of the shared page
_DIGEST = 32
_SEND_EVERY = 16  # digests per write: fewer system calls, answers still early
# Digests the child remembers having sent (chain elements recur), as the parent's cache.
_REMEMBERED = 65_536
_clock = time.monotonic


# The parent's share of a core, measured over windows of at least this many seconds while
# the child runs; below MIN_SHARE the child is stopped (``Helper.before``). With the second
# core taken by other work, the parent got 0.6 to 0.7 of a core beside the child and
# ``verify`` took 1.1 to 1.2 times as long as without it (BENCHMARKS.md); with that core
# idle, the parent keeps a whole core and the child only adds. The share is one less the
# part of the window the parent spent waiting for a core (the kernel's run delay), not the
# CPU it used: an ``ingest`` parent also waits for its commits, and that is no sign of a
# busy machine (the CPU time is the fallback where the kernel does not tell the delay).
WINDOW = 0.05
MIN_SHARE = 0.8
_SCHEDSTAT = "/proc/self/schedstat"
_PR_SET_PDEATHSIG = 1  # linux/prctl.h


def _waited() -> float | None:
    """Seconds the parent's main thread has spent ready to run but waiting for a core (the
    scheduler's run delay, ``/proc/self/schedstat``), or None where the kernel does not
    say. Time spent waiting on a disk or a database is not in it: an ``ingest`` parent
    that waits for its commits is not starved, only one that waits for a CPU."""
    try:
        with open(_SCHEDSTAT, "rb") as stat:
            return int(stat.read().split()[1]) / 1e9
    except (OSError, ValueError, IndexError):
        return None


def _readings() -> tuple[float, float | None, float]:
    """The wall clock, the run delay (``_waited``) and the process's CPU time, now."""
    return _clock(), _waited(), time.process_time()


def die_with_parent(parent: int) -> None:
    """In the helper's child, at once: be killed when the parent dies (Linux's
    ``PR_SET_PDEATHSIG``). The child inherits the parent's open files, an ``ingest``'s
    database connections and the SQLite writer lock's file among them (it never uses
    them); a parent killed with -9 must not leave them held open by an orphan (a
    PostgreSQL session keeping its transaction's locks, the writer ``flock``) while it
    reads on through the capture."""
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:  # the parent died before the line above
        os._exit(1)


def idle_core() -> bool:
    """Whether a second core may be had: this process may run on two or more, and the
    load average of the last minute is below twice their number. Only a first, coarse gate
    (the load average lags, and counts tasks waiting on the disk): once the child runs,
    the parent measures the share of a core it gets (``Helper.before``)."""
    cores = workers()
    if cores < 2:
        return False
    try:
        return os.getloadavg()[0] < 2 * cores
    except OSError:  # pragma: no cover - no load average to read
        return False


@dataclass
class Helper:
    """The forked child and the parent's end of it (``start``)."""

    pid: int
    answers: int  # the read end of the pipe, non-blocking
    shared: mmap.mmap
    fingerprint: str
    alive: bool = True
    marked: int = 0  # digests marked so far
    buffer: bytearray = field(default_factory=bytearray, repr=False)  # read, not yet used
    # Stop the child when the parent gets less than MIN_SHARE of a core (not when forced).
    watch: bool = True
    stopped_early: bool = False
    window: tuple[float, float | None, float] = field(default_factory=lambda: _readings())

    @classmethod
    def start(
        cls,
        inputs: Sequence[tuple[str, bytes]],
        *,
        trust: TrustStore,
        max_element: int,
        skew: int,
        content_type: str | None = None,
        force: bool = False,
    ) -> Helper | None:
        """Fork the child, or None where one would not help (a small input, no idle
        second core); ``force`` forks it whatever the input and the machine, and keeps it
        whatever the parent's share of a core."""
        if not force and (sum(len(data) for _, data in inputs) < MIN_OCTETS or not idle_core()):
            return None
        shared = mmap.mmap(-1, _POSITION.size)  # anonymous, shared with the child
        shared[:] = _POSITION.pack(0)
        read_end, write_end = os.pipe()
        parent = os.getpid()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child's coverage is not collected
            code = 1
            try:
                die_with_parent(parent)
                os.close(read_end)
                signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent stops it
                _child(inputs, trust, max_element, skew, content_type, shared, write_end)
                code = 0
            finally:
                os._exit(code)
        os.close(write_end)
        os.set_blocking(read_end, False)
        return cls(
            pid=pid,
            answers=read_end,
            shared=shared,
            fingerprint=trust.fingerprint,
            watch=not force,
        )

    def before(self, position: int, cache: SignatureCache) -> int:
        """Called before each batch is judged, with the index of its first item: tells the
        child, and marks in ``cache`` every digest the child has sent so far (never
        waiting for more). Returns how many were marked.

        With ``watch``, it also measures the parent's share of a core since the last window:
        on two idle cores the parent runs all the time (a share near 1); when it gets less
        than MIN_SHARE, the child takes CPU from the parent rather than from an idle core
        (measured: 1.1 to 1.2 times as long with one core busy, 1.5 to 1.7 at load 11 on 2
        cores), so it is stopped and the parent does the rest."""
        self.shared[:] = _POSITION.pack(position)
        if not self.alive:
            return 0
        if self.watch and not self.stopped_early and self._starved():
            self.stopped_early = True
            self._end_child()
        while True:
            try:
                chunk = os.read(self.answers, 65536)
            except BlockingIOError:
                break
            if not chunk:  # the child has finished, or is gone
                self.alive = False
                break
            self.buffer += chunk
        whole = len(self.buffer) - len(self.buffer) % _DIGEST
        for i in range(0, whole, _DIGEST):
            cache.mark_verified(bytes(self.buffer[i : i + _DIGEST]), self.fingerprint)
        del self.buffer[:whole]
        self.marked += whole // _DIGEST
        return whole // _DIGEST

    def _starved(self) -> bool:
        now = _readings()
        (wall, waited, cpu), (since, waited_since, cpu_since) = now, self.window
        if wall - since < WINDOW:
            return False
        self.window = now
        if waited is not None and waited_since is not None:  # one less the part spent waiting
            share = 1 - (waited - waited_since) / (wall - since)
        else:  # the part of the window the process ran
            share = (cpu - cpu_since) / (wall - since)
        return share < MIN_SHARE

    def _end_child(self) -> None:
        # What the child sent before it ends is still read (``before``) and marked.
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGKILL)

    def stop(self) -> None:
        """End the child (finished or not) and reap it."""
        os.close(self.answers)
        # SIGKILL: the child holds nothing to clean up (memory and the pipe's write end),
        # and no handler it inherited from the parent can keep it from ending.
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGKILL)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(self.pid, 0)
        self.shared.close()


def _child(  # pragma: no cover - runs in the forked child
    inputs: Sequence[tuple[str, bytes]],
    trust: TrustStore,
    max_element: int,
    skew: int,
    content_type: str | None,
    shared: mmap.mmap,
    out: int,
) -> None:
    verified: set[bytes] = set()
    found: list[bytes] = []

    def send() -> None:
        view = memoryview(b"".join(found))
        while view:
            view = view[os.write(out, view) :]
        found.clear()

    index = -1
    for name, data in inputs:
        for item in read_capture(data, name=name, content_type=content_type, stats=ExtractStats()):
            index += 1
            if isinstance(item, CarrierError):
                continue
            (position,) = _POSITION.unpack(shared[:])
            if index < position + AHEAD:
                continue  # the parent gets there before an answer could
            for digest in _verified_ahead(item.value, trust, max_element, skew, verified):
                if len(verified) >= _REMEMBERED:
                    verified.clear()
                verified.add(digest)
                found.append(digest)
            if len(found) >= _SEND_EVERY:
                send()
    send()


def _verified_ahead(  # pragma: no cover - runs in the forked child
    value: object, trust: TrustStore, max_element: int, skew: int, known: set[bytes]
) -> list[bytes]:
    """The digests of the elements of a carried object whose signature verifies (its
    element, then its chain), not those in ``known``. A JWS whose header was met before is
    read only as far as the signature check needs (``jws.signature_facts``: the parent's
    strict parse reads the same facts wherever it asks for the check); anything else is
    parsed in full."""
    try:
        obj = parse_object(value, max_element=max_element)
    except HandoffError:
        return []
    octets = [obj.status] if isinstance(obj, StatusObject) else [obj.offer, *obj.chain]
    ok = []
    for one in octets:
        digest = handoff_digest(one)
        if digest in known:
            continue
        facts = jws.signature_facts(one) if obj.form is Form.JWS else None
        try:
            if facts is None:
                verify_element(parse_element(one, obj.form), trust, skew=skew)
            else:
                iss, iat, alg, kid, signing_input, signature = facts
                verify_signed(
                    trust,
                    iss=iss,
                    iat=iat,
                    alg=alg,
                    kid=kid,
                    signing_input=signing_input,
                    signature=signature,
                    skew=skew,
                )
        except HandoffError:
            continue
        ok.append(digest)
    return ok
