"""The signature step on a second core, in a forked process (``verify`` on the command line).

``cryptography`` holds the GIL while OpenSSL verifies (bench/lean_path.py: two threads
verifying take longer than one), so the thread pool of ``app.ingest.signatures`` cannot put a
second core to work. A process can. ``verify`` holds its inputs in memory before it judges
them, so a child forked at the start has them too, for nothing: it reads the same capture
the same way (``read_capture`` and ``batched``, so its batches are the parent's), verifies
the signatures of each batch (each item's element and its carried chain) and sends back
only the SHA-256 digests of the elements whose signature verified. The parent marks those
in its signature cache before it judges the batch in input order, and the in-order checks
find them there (``Verifier.check_signature``). As with the threads, a signature that does
not verify is not sent; the in-order check verifies it again and reports the failure as a
serial run does, so verdicts are byte-identical with or without the helper.

The two share each batch by position: the child verifies the signatures of two items in
three, and the parent's in-order checks verify the third's themselves while the child is
already working on the next batch. Per element the child then reads the capture and
parses and verifies two thirds of the elements, the parent reads, parses and judges every
element and verifies a third: about the same time each (BENCHMARKS.md), so neither waits
long for the other. A child that ends early (killed, out of memory) only makes the parent
verify everything itself from then on.

Fork is safe here because the ``verify`` command runs one thread. The HTTP API's ``verify``
runs inside a server with threads and does not use this module.
"""

from __future__ import annotations

import contextlib
import os
import signal
import struct
from collections.abc import Sequence
from dataclasses import dataclass, field

from handoff_context import SignatureCache, TrustStore
from handoff_context._signature import verify_element
from handoff_context.errors import HandoffError

from app.capture.carriers import CarrierError, ExtractStats, read_capture
from app.ingest.batches import batched
from app.ingest.signatures import elements_of, workers

# Below this many octets of input the fork costs more than the second core gives back.
MIN_OCTETS = 256 * 1024

# The child verifies the items of a batch whose position is not a multiple of this; the
# parent the others.
SHARE = 3
_HEAD = struct.Struct("qi")  # an answer: batch index, then how many digests follow
_DIGEST = 32
# Digests the child remembers having sent (chain elements recur), as the parent's cache.
_REMEMBERED = 65_536


@dataclass
class Helper:
    """The forked child and the parent's end of it (``start``)."""

    pid: int
    answers: int  # the read end of the pipe
    fingerprint: str
    batch: int = -1  # the parent's current batch
    alive: bool = True
    buffer: bytearray = field(default_factory=bytearray, repr=False)  # read, not yet used

    @classmethod
    def start(
        cls,
        inputs: Sequence[tuple[str, bytes]],
        *,
        trust: TrustStore,
        max_element: int,
        skew: int,
        content_type: str | None = None,
    ) -> Helper | None:
        """Fork the child, or None where one would not help (one core, a small input)."""
        if workers() < 2 or sum(len(data) for _, data in inputs) < MIN_OCTETS:
            return None
        read_end, write_end = os.pipe()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child's coverage is not collected
            code = 1
            try:
                os.close(read_end)
                signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent stops it
                _child(inputs, trust, max_element, skew, content_type, write_end)
                code = 0
            finally:
                os._exit(code)
        os.close(write_end)
        return cls(pid=pid, answers=read_end, fingerprint=trust.fingerprint)

    def before(self, cache: SignatureCache) -> int:
        """Called before each batch is judged, in order: waits for the child's answer for
        the batch and marks what verified. Returns how many digests were marked."""
        self.batch += 1
        while self.alive:
            answer = self._answer()
            if answer is None:  # the child is gone: the in-order checks verify
                self.alive = False
                break
            index, digests = answer
            if index == self.batch:
                for digest in digests:
                    cache.mark_verified(digest, self.fingerprint)
                return len(digests)
        return 0

    def _answer(self) -> tuple[int, list[bytes]] | None:
        head = self._read(_HEAD.size)
        if head is None:
            return None
        index, count = _HEAD.unpack(head)
        body = self._read(count * _DIGEST)
        if body is None:
            return None
        return index, [body[i : i + _DIGEST] for i in range(0, len(body), _DIGEST)]

    def _read(self, n: int) -> bytes | None:
        while len(self.buffer) < n:
            chunk = os.read(self.answers, max(65536, n))
            if not chunk:
                return None
            self.buffer += chunk
        out = bytes(self.buffer[:n])
        del self.buffer[:n]  # a bytearray drops its head without copying the rest
        return out

    def stop(self) -> None:
        """End the child (finished or not) and reap it."""
        os.close(self.answers)
        # SIGKILL: the child holds nothing to clean up (memory and the pipe's write end),
        # and no handler it inherited from the parent can keep it from ending.
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGKILL)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(self.pid, 0)


def _child(  # pragma: no cover - runs in the forked child
    inputs: Sequence[tuple[str, bytes]],
    trust: TrustStore,
    max_element: int,
    skew: int,
    content_type: str | None,
    out: int,
) -> None:
    verified: set[bytes] = set()
    index = -1
    for name, data in inputs:
        items = read_capture(data, name=name, content_type=content_type, stats=ExtractStats())
        for batch in batched(items):
            index += 1
            found: list[bytes] = []
            for position, item in enumerate(batch):
                if position % SHARE == SHARE - 1 or isinstance(item, CarrierError):
                    continue  # the parent's, or nothing to verify
                for element in elements_of(item.value, max_element=max_element):
                    if element.digest in verified:
                        continue
                    try:
                        verify_element(element, trust, skew=skew)
                    except HandoffError:
                        continue
                    if len(verified) >= _REMEMBERED:
                        verified.clear()
                    verified.add(element.digest)
                    found.append(element.digest)
            message = _HEAD.pack(index, len(found)) + b"".join(found)
            view = memoryview(message)
            while view:
                view = view[os.write(out, view) :]
