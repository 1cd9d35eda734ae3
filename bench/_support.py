"""Shared pieces of the ingest benchmarks: raw-verify baseline, machine facts, clean-up.

Not a benchmark itself. The benchmarks import it (they run as ``python bench/NAME.py``, so
this directory is on ``sys.path``); the repository root is put on ``sys.path`` too, so the
tests' throwaway PostgreSQL helper (``tests/pg.py``) is reused. Every raw-verify timing loop
lives here (``RawVerifier``, ``raw_loop``, ``raw_verify_us``), so the benchmarks divide by
the same thing.
"""

from __future__ import annotations

import json
import os
import platform
import resource
import signal
import statistics
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = Path(__file__).resolve().parent / "results"
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from cryptography.exceptions import InvalidSignature  # noqa: E402
from cryptography.hazmat.primitives.asymmetric import ec  # noqa: E402
from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature  # noqa: E402
from cryptography.hazmat.primitives.hashes import SHA256  # noqa: E402
from handoff_context import (  # noqa: E402
    Element,
    StatusObject,
    TrustStore,
    parse_element,
    parse_object,
)
from handoff_context.errors import HandoffError  # noqa: E402

from tests import pg  # noqa: E402

# --- raw signature verification: the physical limit every figure is divided by ------------


@dataclass(frozen=True)
class RawCase:
    """One element's signature as raw ``cryptography`` needs it (picklable)."""

    iss: str
    kid: str | None
    alg: str
    signing_input: bytes
    signature: bytes  # raw r||s (ES256) or 64 bytes (Ed25519)


def raw_case(element: Element) -> RawCase:
    return RawCase(
        iss=element.payload.iss,
        kid=element.header.kid,
        alg=element.header.alg,
        signing_input=element.signing_input,
        signature=element.signature,
    )


def top_element(value: object) -> Element | None:
    """The offer or status a carried object holds (None when it does not parse)."""
    try:
        obj = parse_object(value)
        octets = obj.status if isinstance(obj, StatusObject) else obj.offer
        return parse_element(octets, obj.form)
    except HandoffError:
        return None


class RawVerifier:
    """Raw ``cryptography`` verify of a fixed set of signatures: one call of ``round`` verifies
    each once (ES256 from a precomputed DER signature, as in ``verify_rate.py``)."""

    def __init__(self, trust: TrustStore, cases: Iterable[RawCase]) -> None:
        self.jobs: list[tuple[Any, bytes, bytes, bool]] = []
        for case in cases:
            keys = trust.keys_for(case.iss) or ()
            want = "EC" if case.alg == "ES256" else "OKP"
            fits = [k for k in keys if k.kty == want and (case.kid is None or k.kid == case.kid)]
            if not fits:
                continue  # an untrusted issuer: no key, nothing a receiver could verify
            public = fits[0].key.get_op_key("verify")
            if case.alg == "ES256":
                sig = encode_dss_signature(
                    int.from_bytes(case.signature[:32], "big"),
                    int.from_bytes(case.signature[32:], "big"),
                )
                self.jobs.append((public, sig, case.signing_input, True))
            else:
                self.jobs.append((public, case.signature, case.signing_input, False))
        if not self.jobs:
            raise SystemExit("no signature of the capture can be verified with its trust file")
        self.samples: list[float] = []  # signatures per second, one per round
        # Signatures per CPU second (this process's CPU time), one per round: on a machine
        # shared with other work the wall-clock rate moves with the load, the CPU rate less.
        self.cpu_samples: list[float] = []

    def round(self) -> float:
        """Verify every signature once; returns the seconds taken and records the rate."""
        ecdsa = ec.ECDSA(SHA256())
        cpu = time.process_time()
        start = time.perf_counter()
        for public, sig, data, is_ec in self.jobs:
            try:
                if is_ec:
                    public.verify(sig, data, ecdsa)
                else:
                    public.verify(sig, data)
            except InvalidSignature:  # injected bad-signature faults cost the same work
                pass
        elapsed = time.perf_counter() - start
        cpu = time.process_time() - cpu
        self.samples.append(len(self.jobs) / elapsed)
        self.cpu_samples.append(len(self.jobs) / max(cpu, 1e-9))
        return elapsed

    @property
    def per_second(self) -> float:
        return statistics.median(self.samples)

    @property
    def per_cpu_second(self) -> float:
        return statistics.median(self.cpu_samples)


def raw_loop(elements: Sequence[Element], public: Any) -> Callable[[], None]:
    """Raw ``cryptography`` verify of each element's signature with one public key (a
    ``cryptography`` key object), as a callable to time: ES256 from a precomputed DER
    signature, Ed25519 as is. The loop ``verify_rate.py`` and ``trust_sources.py`` divide
    by."""
    if elements and elements[0].header.alg == "ES256":
        ders = [
            encode_dss_signature(
                int.from_bytes(e.signature[:32], "big"), int.from_bytes(e.signature[32:], "big")
            )
            for e in elements
        ]
        pairs = [(der, e.signing_input) for der, e in zip(ders, elements, strict=True)]

        def raw_es256() -> None:
            for der, data in pairs:
                public.verify(der, data, ec.ECDSA(SHA256()))

        return raw_es256

    def raw_ed25519() -> None:
        for e in elements:
            public.verify(e.signature, e.signing_input)

    return raw_ed25519


def raw_verify_us(n: int) -> float:
    """Microseconds of one raw ES256 verify (``cryptography``, a 600-octet message), over
    ``n`` verifications: the unit ``reporter_overhead.py`` and ``integration_overhead.py``
    give their per-call costs in."""
    key = ec.generate_private_key(ec.SECP256R1())
    message = b"x" * 600
    signature = key.sign(message, ec.ECDSA(SHA256()))
    public = key.public_key()
    start = time.perf_counter()
    for _ in range(n):
        public.verify(signature, message, ec.ECDSA(SHA256()))
    return (time.perf_counter() - start) / n * 1e6


def rate(fn: Callable[[], None], n: int) -> float:
    """Calls of ``fn`` take ``n`` operations: operations per second of one call."""
    start = time.perf_counter()
    fn()
    return n / (time.perf_counter() - start)


# --- machine facts, memory, results -------------------------------------------------------


def machine() -> dict[str, object]:
    import cryptography
    import sqlalchemy

    model = platform.processor()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "python": platform.python_version(),
        "processor": model,
        "cores": os.cpu_count(),
        "system": platform.platform(),
        "cryptography": cryptography.__version__,
        "sqlalchemy": sqlalchemy.__version__,
        "sqlite": __import__("sqlite3").sqlite_version,
        "load_average_at_start": os.getloadavg()[0],
    }


def rss_mib() -> float:
    """Current resident set size of this process (VmRSS), MiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def peak_rss_mib() -> float:
    """Peak resident set size of this process (getrusage ru_maxrss, KiB on Linux), MiB."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def write_results(name: str, doc: dict[str, object]) -> Path:
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"{name}.json"
    full = {"benchmark": name, "when": int(time.time()), "machine": machine(), **doc}
    path.write_text(json.dumps(full, indent=2) + "\n")
    return path


# --- clean-up even when interrupted -------------------------------------------------------


class Interrupted(KeyboardInterrupt):
    """SIGTERM/SIGHUP turned into an exception, so every ``finally`` runs."""


@contextmanager
def interruptible() -> Iterator[None]:
    """SIGTERM and SIGHUP unwind like Ctrl-C (KeyboardInterrupt) inside the block."""

    def handler(signum: int, _frame: FrameType | None) -> None:
        raise Interrupted(f"signal {signum}")

    previous = {s: signal.signal(s, handler) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


@contextmanager
def postgres() -> Iterator[pg.Cluster]:
    """A throwaway PostgreSQL cluster on 127.0.0.1 (tests/pg.py), stopped and removed on
    the way out, whatever the way out is."""
    bin_dir = pg.find_bin()
    if bin_dir is None:
        raise SystemExit(
            "PostgreSQL server binaries not found under /usr/lib/postgresql/*/bin "
            "(apt-get install -y postgresql), or run with --db sqlite"
        )
    cluster = pg.start(bin_dir)
    try:
        yield cluster
    finally:
        cluster.stop()


def ignore_sigint_in_child() -> None:
    """For worker processes: leave Ctrl-C to the parent, which stops them in order."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
