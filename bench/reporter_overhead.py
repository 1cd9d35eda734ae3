"""The reporter's overhead on an agent: what one ``observe_received`` call costs the thread
that makes it, per message (p50 and p99), while the reporter's background thread posts the
batches to a live HTTP server on loopback in the same process (so the GIL is shared, as in
an agent).

Cases: an A2A JSON-RPC request carrying a signed handoff, as a plain dict; the same message
as the a2a-sdk builds it (a protobuf ``SendMessageRequest``); a message without a handoff
(the fast path: converted, found to carry nothing, counted); and the dict case with the
service down (the queue full, the oldest dropped). Each is also given as a ratio to one raw
ES256 signature verification with ``cryptography``, measured interleaved in the same run
(absolute times drift between runs and machines).

    .venv/bin/python bench/reporter_overhead.py [--n 20000] [--rounds 3]

Prints a table and writes bench/results/reporter_overhead.json.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import platform
import socket
import statistics
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from _support import raw_verify_us
from a2a.types import a2a_pb2 as pb
from google.protobuf import json_format
from handoff_context import Signer, handoff_object, make_offer
from handoff_context.reporter import A2A_EXTENSION_URI, Reporter

RESULTS = Path(__file__).parent / "results"


class _Sink(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, *args: Any) -> None:
        pass


def _message(signer: Signer) -> tuple[dict[str, Any], pb.SendMessageRequest]:
    offer = make_offer(signer, aud="spiffe://b/agent/coder", dialog="ctx-1", iat=int(time.time()))
    message = pb.Message(
        message_id="m-1", context_id="ctx-1", role=pb.Role.ROLE_USER, parts=[pb.Part(text="go")]
    )
    message.extensions.append(A2A_EXTENSION_URI)
    message.metadata.update({A2A_EXTENSION_URI: handoff_object(offer)})
    request = pb.SendMessageRequest(message=message)
    rpc = {
        "jsonrpc": "2.0",
        "id": "1",
        "method": "SendMessage",
        "params": json_format.MessageToDict(request),
    }
    return rpc, request


def _times(call: Callable[[], None], n: int) -> list[float]:
    out = []
    for _ in range(n):
        start = time.perf_counter_ns()
        call()
        out.append((time.perf_counter_ns() - start) / 1000)
    return out


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=20_000, help="calls per case and round")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    signer = Signer.generate("spiffe://a/agent/planner", "ES256")
    rpc, proto = _message(signer)
    plain = {"jsonrpc": "2.0", "id": "2", "method": "tasks/list", "params": {}}
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Sink)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    up = f"http://127.0.0.1:{server.server_address[1]}"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        down = f"http://127.0.0.1:{s.getsockname()[1]}"  # nobody listens here
    live = Reporter(up, "t", receiver="spiffe://b/agent/coder", max_queue=1_000_000)
    away = Reporter(down, "t", receiver="spiffe://b/agent/coder", max_queue=1000)
    cases: dict[str, Callable[[], None]] = {
        "dict (A2A JSON-RPC)": lambda: live.observe_received(rpc),
        "protobuf (a2a-sdk)": lambda: live.observe_received(proto),
        "no handoff (skipped)": lambda: live.observe_received(plain),
        "dict, service down": lambda: away.observe_received(rpc),
    }
    samples: dict[str, list[float]] = {name: [] for name in cases}
    raw: list[float] = []
    for _ in range(args.rounds):  # interleaved, so drift hits every case alike
        raw.append(raw_verify_us(2000))
        for name, call in cases.items():
            samples[name] += _times(call, args.n)
    assert live.flush(120), live.stats
    live.close()
    away.close(0.1)
    server.shutdown()
    verify_us = statistics.median(raw)
    rows = []
    for name, values in samples.items():
        p50, p99 = _quantile(values, 0.5), _quantile(values, 0.99)
        rows.append(
            {
                "case": name,
                "p50_us": round(p50, 2),
                "p99_us": round(p99, 2),
                "p50_x_raw_verify": round(p50 / verify_us, 3),
                "p99_x_raw_verify": round(p99 / verify_us, 3),
            }
        )
    print(f"raw ES256 verify: {verify_us:.1f} us (median of {args.rounds} rounds)")
    print(f"{'case':24} {'p50 us':>8} {'p99 us':>8} {'p50/raw':>8} {'p99/raw':>8}")
    for r in rows:
        print(
            f"{r['case']:24} {r['p50_us']:8.2f} {r['p99_us']:8.2f} "
            f"{r['p50_x_raw_verify']:8.3f} {r['p99_x_raw_verify']:8.3f}"
        )
    print(f"delivered {live.stats.delivered} of {live.stats.observed}; down: {away.stats}")
    RESULTS.mkdir(exist_ok=True)
    result = {
        "python": platform.python_version(),
        "n": args.n,
        "rounds": args.rounds,
        "raw_verify_us": round(verify_us, 2),
        "cases": rows,
        "delivered": live.stats.delivered,
        "observed": live.stats.observed,
        "down": dataclasses.asdict(away.stats),
    }
    (RESULTS / "reporter_overhead.json").write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
